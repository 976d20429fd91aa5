//! The lazy file system's promise, through the real FUSE mount and std::fs: after a cut and
//! a remount, exactly the synced state is there. Needs root and /dev/fuse; fails (never
//! skips) without them.

use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use rustqueue_powercut::{CutMode, LazyFs, Mounted};

fn mount(fs: &LazyFs, at: &Path) -> Mounted {
    fs.mount(at).unwrap_or_else(|e| {
        panic!("{e}\nThe power-cut tests need FUSE: run as root on a host or container with /dev/fuse (docker run --device /dev/fuse --cap-add SYS_ADMIN).")
    })
}

fn sync_dir(p: &Path) {
    File::open(p).unwrap().sync_all().unwrap();
}

fn put(p: &Path, bytes: &[u8]) -> File {
    let mut f = File::create(p).unwrap();
    f.write_all(bytes).unwrap();
    f
}

/// Runs `before` on a fresh mount, cuts the power, remounts, and returns what each of
/// `paths` holds then (None = absent).
fn after_cut(mode: CutMode, before: impl FnOnce(&Path), paths: &[&str]) -> Vec<Option<Vec<u8>>> {
    let dir = tempfile::tempdir().unwrap();
    let fs = LazyFs::new();
    let m = mount(&fs, dir.path());
    before(dir.path());
    fs.cut();
    m.unmount().unwrap();
    fs.restart(mode);
    let _m = mount(&fs, dir.path());
    paths
        .iter()
        .map(|p| fs::read(dir.path().join(p)).ok())
        .collect()
}

fn some(s: &str) -> Option<Vec<u8>> {
    Some(s.as_bytes().to_vec())
}

type Case = (
    &'static str,
    fn(&Path),
    &'static [&'static str],
    Vec<Option<Vec<u8>>>,
);

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test table or scenario reads best in one piece"
)]
fn after_a_cut_exactly_the_synced_state_is_there() {
    let cases: Vec<Case> = vec![
        (
            "file and name synced: all of it",
            |d| {
                let f = put(&d.join("a"), b"hello");
                f.sync_all().unwrap();
                sync_dir(d);
            },
            &["a"],
            vec![some("hello")],
        ),
        (
            "name synced, data not: empty file",
            |d| {
                let _f = put(&d.join("a"), b"hello");
                sync_dir(d);
            },
            &["a"],
            vec![some("")],
        ),
        (
            "data synced, name not: no file",
            |d| {
                put(&d.join("a"), b"hello").sync_all().unwrap();
            },
            &["a"],
            vec![None],
        ),
        (
            "an append after the sync is lost",
            |d| {
                let mut f = put(&d.join("a"), b"one ");
                f.sync_data().unwrap(); // fdatasync counts
                sync_dir(d);
                f.write_all(b"two").unwrap();
            },
            &["a"],
            vec![some("one ")],
        ),
        (
            "an unsynced truncate is undone",
            |d| {
                put(&d.join("a"), b"keep me").sync_all().unwrap();
                sync_dir(d);
                OpenOptions::new()
                    .write(true)
                    .open(d.join("a"))
                    .unwrap()
                    .set_len(2)
                    .unwrap();
            },
            &["a"],
            vec![some("keep me")],
        ),
        (
            "overwrite in place across pages, synced",
            |d| {
                let mut f = put(&d.join("a"), &vec![b'x'; 10_000]);
                f.sync_all().unwrap();
                sync_dir(d);
                f.seek(SeekFrom::Start(4090)).unwrap();
                f.write_all(b"0123456789").unwrap();
                f.sync_all().unwrap();
                f.write_all(b"lost").unwrap();
            },
            &["a"],
            vec![Some({
                let mut v = vec![b'x'; 10_000];
                v[4090..4100].copy_from_slice(b"0123456789");
                v
            })],
        ),
        (
            "atomic replace without syncing the directory: the old file",
            |d| {
                put(&d.join("meta"), b"old").sync_all().unwrap();
                sync_dir(d);
                put(&d.join("meta.tmp"), b"new").sync_all().unwrap();
                fs::rename(d.join("meta.tmp"), d.join("meta")).unwrap();
            },
            &["meta", "meta.tmp"],
            vec![some("old"), None],
        ),
        (
            "atomic replace with the directory synced: the new file",
            |d| {
                put(&d.join("meta"), b"old").sync_all().unwrap();
                sync_dir(d);
                put(&d.join("meta.tmp"), b"new").sync_all().unwrap();
                fs::rename(d.join("meta.tmp"), d.join("meta")).unwrap();
                sync_dir(d);
            },
            &["meta", "meta.tmp"],
            vec![some("new"), None],
        ),
        (
            "rename of an unsynced file, directory synced: name there, data lost",
            |d| {
                let _f = put(&d.join("t"), b"unsynced");
                fs::rename(d.join("t"), d.join("u")).unwrap();
                sync_dir(d);
            },
            &["t", "u"],
            vec![None, some("")],
        ),
        (
            "an unsynced unlink is undone",
            |d| {
                put(&d.join("a"), b"still here").sync_all().unwrap();
                sync_dir(d);
                fs::remove_file(d.join("a")).unwrap();
            },
            &["a"],
            vec![some("still here")],
        ),
        (
            "a synced unlink stays",
            |d| {
                put(&d.join("a"), b"gone").sync_all().unwrap();
                sync_dir(d);
                fs::remove_file(d.join("a")).unwrap();
                sync_dir(d);
            },
            &["a"],
            vec![None],
        ),
        (
            "a subdirectory whose own name was never synced is lost with its files",
            |d| {
                fs::create_dir(d.join("sub")).unwrap();
                put(&d.join("sub/a"), b"x").sync_all().unwrap();
                sync_dir(&d.join("sub"));
            },
            &["sub/a"],
            vec![None],
        ),
        (
            "nested, everything synced",
            |d| {
                fs::create_dir(d.join("sub")).unwrap();
                sync_dir(d);
                put(&d.join("sub/a"), b"x").sync_all().unwrap();
                sync_dir(&d.join("sub"));
            },
            &["sub/a"],
            vec![some("x")],
        ),
        (
            "a file replaced by rename keeps neither half-state",
            |d| {
                put(&d.join("a"), b"A").sync_all().unwrap();
                put(&d.join("b"), b"B").sync_all().unwrap();
                sync_dir(d);
                fs::rename(d.join("a"), d.join("b")).unwrap();
                sync_dir(d);
                // The old "b" inode is unreachable now; nothing of it may come back.
            },
            &["a", "b"],
            vec![None, some("A")],
        ),
    ];
    for (name, before, paths, want) in cases {
        let got = after_cut(CutMode::DropUnsynced, before, paths);
        assert_eq!(got, want, "case: {name}");
    }
}

#[test]
fn after_the_cut_instant_nothing_succeeds_until_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let fs = LazyFs::new();
    let m = mount(&fs, dir.path());
    let mut f = put(&dir.path().join("a"), b"before");
    f.sync_all().unwrap();
    sync_dir(dir.path());
    fs.cut();
    // A process still running after the cut must not be told a later sync succeeded.
    let wrote = f.write_all(b"after");
    let synced = f.sync_all();
    assert!(
        wrote.is_err() || synced.is_err(),
        "a write+fsync after the cut succeeded"
    );
    drop(f);
    m.unmount().unwrap();
    let stats = fs.restart(CutMode::DropUnsynced);
    assert_eq!(stats.pages_kept, 0);
    let _m = mount(&fs, dir.path());
    assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"before");
    // And the file system works normally again.
    put(&dir.path().join("b"), b"again").sync_all().unwrap();
    assert_eq!(fs::read(dir.path().join("b")).unwrap(), b"again");
}

#[test]
fn a_torn_cut_keeps_each_unsynced_page_whole_or_not_at_all() {
    let pages = 64usize;
    for seed in 0..8u64 {
        let got = after_cut(
            CutMode::Torn(seed),
            |d| {
                let mut f = put(&d.join("a"), &vec![b'o'; pages * 4096]);
                f.sync_all().unwrap();
                sync_dir(d);
                f.seek(SeekFrom::Start(0)).unwrap();
                f.write_all(&vec![b'n'; pages * 4096]).unwrap();
            },
            &["a"],
        );
        let data = got[0].clone().expect("file");
        assert_eq!(data.len(), pages * 4096);
        let mut new = 0;
        for page in data.chunks(4096) {
            assert!(
                page.iter().all(|b| *b == page[0]),
                "seed {seed}: a page is mixed"
            );
            new += usize::from(page[0] == b'n');
        }
        // 64 fair coin flips: all heads or all tails would mean the mode does nothing.
        assert!(
            0 < new && new < pages,
            "seed {seed}: {new} of {pages} pages new"
        );
    }
}
