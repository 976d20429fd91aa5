//! `rustqueue-testbed`: `up` starts a local testbed and keeps it running until Ctrl-C;
//! `serve` is the built-in tiny server image (see the library's `testserver` module).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use rustqueue_testbed::{Image, Testbed, TestbedOptions, netns, testserver};

#[derive(Parser)]
#[command(about = "A local Kubernetes (upstream control plane + process kubelet) for e2e tests")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a testbed, print its kubeconfig path, run until Ctrl-C, then tear it down.
    Up {
        /// How many Nodes to register.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Label for every Node, `key=value` (repeatable).
        #[arg(long = "label")]
        labels: Vec<String>,
        /// Image mapping `reference=dir` or `reference=dir:entrypoint` (repeatable). Default:
        /// `rustqueue:dev=<target>/release` with the workspace's release binaries.
        #[arg(long = "image")]
        images: Vec<String>,
        /// Image archive pushed into the testbed's registry, `reference=path` (repeatable), e.g.
        /// `rustqueue:dev=target/images/rustqueue.tar` from `make images`. Pods naming it run
        /// from the image (unless `--image` maps the same reference to a directory).
        #[arg(long = "registry-image")]
        registry_images: Vec<String>,
    },
    /// The tiny test server (image `testbed/tiny:1`).
    Serve {
        /// Address to listen on (default `$POD_IP:8080`).
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Where PUT data is stored.
        #[arg(long, default_value = "/data")]
        data_dir: PathBuf,
    },
}

fn default_release_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    std::path::absolute(target.join("release")).unwrap_or_else(|_| target.join("release"))
}

fn parse_image(s: &str) -> anyhow::Result<(String, Image)> {
    let (reference, rest) = s
        .split_once('=')
        .context("--image expects reference=dir[:entrypoint]")?;
    let image = match rest.split_once(':') {
        Some((dir, entry)) => Image::dir(dir).entrypoint([entry]),
        None => Image::dir(rest),
    };
    Ok((reference.to_string(), image))
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "rustqueue_testbed=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().cmd {
        Cmd::Serve { listen, data_dir } => {
            let listen = match listen {
                Some(l) => l,
                None => {
                    let ip = std::env::var("POD_IP").unwrap_or_else(|_| "127.0.0.1".into());
                    format!("{ip}:{}", testserver::TINY_PORT).parse()?
                }
            };
            tokio::runtime::Runtime::new()?.block_on(testserver::serve(listen, data_dir))?;
        }
        Cmd::Up {
            nodes,
            labels,
            images,
            registry_images,
        } => {
            let mut opts = TestbedOptions::default().nodes(nodes);
            for l in &labels {
                let (k, v) = l.split_once('=').context("--label expects key=value")?;
                opts = opts.node_label(k, v);
            }
            for r in &registry_images {
                let (reference, path) = r
                    .split_once('=')
                    .context("--registry-image expects reference=path")?;
                opts = opts.registry_image(reference, std::path::absolute(path)?);
            }
            if !registry_images
                .iter()
                .any(|r| r.starts_with("rustqueue:dev="))
            {
                opts = opts.image("rustqueue:dev", Image::dir(default_release_dir()));
            }
            for i in &images {
                let (reference, image) = parse_image(i)?;
                opts = opts.image(&reference, image);
            }
            if let Some(dir) = std::env::current_exe()?.parent() {
                opts = opts.tiny_image_dir(dir);
            }
            // Bound before leaving the host's network namespace, so kubectl on the host can
            // reach the API server through it.
            let host_listener = std::net::TcpListener::bind("127.0.0.1:0")
                .context("binding the host-side API server port")?;
            let rt = netns::isolated_runtime()?;
            rt.block_on(up(opts, host_listener))?;
        }
    }
    Ok(())
}

async fn up(opts: TestbedOptions, host_listener: std::net::TcpListener) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let bed = Testbed::start(opts).await?;
    let host_port = host_listener.local_addr()?.port();
    host_listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(host_listener)?;
    let inner = bed.apiserver_addr();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect(inner).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    let kubeconfig = std::fs::read_to_string(bed.kubeconfig_path())?.replace(
        &format!("https://{inner}"),
        &format!("https://127.0.0.1:{host_port}"),
    );
    let host_kubeconfig = bed.dir().join("kubeconfig-host");
    std::fs::write(&host_kubeconfig, kubeconfig)?;
    println!("{}", host_kubeconfig.display());
    // The machine's own kubectl may be older than the cluster: name the pinned one.
    let kubectl = rustqueue_testbed::kubectl_path();
    let kubectl_note = if kubectl.exists() {
        String::new()
    } else {
        " (not installed yet: scripts/deps.sh kubectl)".to_string()
    };
    eprintln!(
        "testbed up in {:.1}s: Kubernetes {} on nodes {}; work dir {}\n\
         try: {}{kubectl_note} --kubeconfig {} get nodes\n\
         Pods live in the testbed's own network namespace; to reach a Pod IP run commands under\n\
         `nsenter --net=/proc/{}/ns/net`.\nCtrl-C tears it down.",
        started.elapsed().as_secs_f64(),
        rustqueue_testbed::k8s_version(),
        bed.node_names().join(", "),
        bed.dir().display(),
        kubectl.display(),
        host_kubeconfig.display(),
        std::process::id(),
    );
    tokio::signal::ctrl_c().await?;
    eprintln!("tearing down");
    bed.shutdown();
    Ok(())
}
