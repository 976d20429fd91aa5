//! The Kodo cutover (docs/kodo.md) as one pure function: from the spec, the observed Gateways
//! and discovery Pods, and the previous status, decide the Gateway replicas, the discovery mode
//! and Service route, the fences (advertisement, grace, producer restart), whether brokers may
//! be disrupted, the decommission gate, the phase overlay and the nine Kodo conditions.
//!
//! Fail-closed ordering: Gateways come up before any broker disruption; discovery switches to
//! Kodo mode only once three Gateways are Ready, and its Service selector flips atomically only
//! once every new-mode discovery Pod is Ready (and flips back if they fail their soak); brokers
//! are disrupted only after the Gateways were advertised for the whole grace and the producers
//! were restarted since. Disabling needs an explicit confirmation, keeps the Gateways until
//! discovery advertises the brokers again, and never brings deleted Gateways back.

use rustqueue_api::crd::{ConditionStatus, RustQueueSpec, RustQueueStatus};

use super::conditions::{ConditionSpec, ConditionType, Phase, cond};
use super::model::Observed;
use crate::render::kodo::{DEFAULT_MIN_READY_SECONDS, GATEWAYS};
use crate::render::{DiscoveryMode, KodoLayout};
use ConditionType as C;

/// Brokers the profile runs (`minBrokers` = `maxBrokers` = 3 while it is enabled).
pub const BROKERS: i32 = 3;

/// What the cutover reads.
pub struct Input<'a> {
    /// The spec.
    pub spec: &'a RustQueueSpec,
    /// The cluster.
    pub obs: &'a Observed,
    /// The previous status (condition transition times, the nonce baseline).
    pub previous: &'a RustQueueStatus,
    /// Unix seconds.
    pub now: u64,
    /// The cutover grace in effect.
    pub grace: u64,
    /// The revision the Gateway Pods rendered now carry.
    pub gateway_revision: &'a str,
    /// Every broker of the target set runs the target revision and is Ready.
    pub target_brokers_ready: bool,
    /// Broker Pods Ready (any revision).
    pub ready_brokers: i32,
}

/// What the cutover decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cutover {
    /// What to render.
    pub layout: KodoLayout,
    /// Remove the Gateways (not wanted, not retained, owned by this RustQueue, still there).
    pub delete_gateways: bool,
    /// `spec.kodoCompatibility.enabled`.
    pub enabled: bool,
    /// The Gateway StatefulSet exists with replicas > 0.
    pub gateways_active: bool,
    /// Gateway Pods Ready on the latest StatefulSet revision and the rendered template.
    pub gateways_ready_count: usize,
    /// Kodo mode advertised: the Service selects Kodo-mode discovery Pods, all Ready.
    pub advertised: bool,
    /// Seconds the advertisement has held (0 when not advertised).
    pub advertised_for: u64,
    /// The grace in effect.
    pub grace: u64,
    /// The producer-restart baseline after this reconcile.
    pub baseline: Option<String>,
    /// The nonce changed since the baseline was captured.
    pub restart_confirmed: bool,
    /// Direct mode advertised: the Service selects direct-mode discovery Pods, all Ready.
    pub direct_advertised: bool,
    /// Seconds direct advertisement has held.
    pub direct_for: u64,
    /// Disabling: the Gateways are kept for safety.
    pub retained: bool,
    /// Disabled without confirmation while the Gateways run: nothing may change.
    pub decommission_blocked: bool,
    /// Brokers may be drained, replaced or removed.
    pub disruptions_allowed: bool,
    /// Disabling: discovery is held in Kodo mode until the target brokers are current+Ready.
    pub holding_discovery: bool,
}

impl Cutover {
    /// Every gate of the enabled profile holds.
    pub fn gates_hold(&self) -> bool {
        self.gateways_ready() && self.advertised && self.grace_elapsed() && self.restart_confirmed
    }
    /// Three Gateways Ready.
    pub fn gateways_ready(&self) -> bool {
        self.gateways_ready_count >= GATEWAYS as usize
    }
    /// The advertisement held for the grace.
    pub fn grace_elapsed(&self) -> bool {
        self.advertised && self.advertised_for >= self.grace
    }
}

/// Seconds condition `type_` has been True with `reason`, from its lastTransitionTime.
fn held_for(
    previous: &RustQueueStatus,
    type_: ConditionType,
    reason: &str,
    now: u64,
) -> Option<u64> {
    let c = previous.condition(type_.as_str())?;
    if c.status != ConditionStatus::True || c.reason != reason {
        return None;
    }
    let t: jiff::Timestamp = c.last_transition_time.parse().ok()?;
    let since = u64::try_from(t.as_second()).ok()?;
    Some(now.saturating_sub(since))
}

/// Decide the cutover: what runs now, then (unless the decommission gate holds everything)
/// discovery's mode and route, the fences they open, and the Gateways' fate.
pub fn cutover(i: &Input<'_>) -> Cutover {
    let k = &i.spec.kodo_compatibility;
    let gw = i.obs.kodo.gateways.as_ref();
    let gateways_active = gw.is_some_and(|g| g.replicas > 0);
    let current_mode = served_mode(i, gateways_active);
    let soak = if k.enabled || gateways_active {
        i32::try_from(i.grace + 30).unwrap_or(i32::MAX)
    } else {
        DEFAULT_MIN_READY_SECONDS
    };
    let mut out = Cutover {
        layout: KodoLayout {
            gateway_replicas: None,
            discovery_mode: current_mode,
            route: i.obs.kodo.discovery_route,
            discovery_min_ready_seconds: soak,
        },
        delete_gateways: false,
        enabled: k.enabled,
        gateways_active,
        gateways_ready_count: ready_gateways(i),
        advertised: false,
        advertised_for: 0,
        grace: i.grace,
        baseline: None,
        restart_confirmed: false,
        direct_advertised: false,
        direct_for: 0,
        retained: false,
        decommission_blocked: false,
        disruptions_allowed: false,
        holding_discovery: false,
    };
    if gateways_active && !k.enabled && !k.decommission_confirmed {
        // The gate: hold everything exactly as it runs.
        out.decommission_blocked = true;
        out.retained = true;
        out.layout.gateway_replicas = gw.map(|g| g.replicas);
        return out;
    }
    route_discovery(i, current_mode, &mut out);
    advertisement_fences(i, &mut out);
    gateways_fate(i, &mut out);
    out
}

/// Gateway Pods Ready on the StatefulSet's latest revision and the template rendered now.
fn ready_gateways(i: &Input<'_>) -> usize {
    i.obs.kodo.gateways.as_ref().map_or(0, |g| {
        g.pods
            .iter()
            .filter(|p| {
                p.ready
                    && p.controller_revision.is_some()
                    && p.controller_revision == g.update_revision
                    && p.revision.as_deref() == Some(i.gateway_revision)
            })
            .count()
    })
}

/// Discovery Pods Ready in mode `m`.
fn ready_in(i: &Input<'_>, m: DiscoveryMode) -> i32 {
    let n = i
        .obs
        .kodo
        .discovery_pods
        .iter()
        .filter(|p| p.ready && p.mode == Some(m))
        .count();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Discovery Pods a mode needs Ready before the Service selects it.
fn needed(i: &Input<'_>) -> i32 {
    i.spec.discovery_replicas.max(2)
}

/// The mode discovery serves: its template's label; when the Deployment vanished, what the
/// previous status says it served while the Gateways run (Kodo mode advertised, or a disable
/// not yet advertising the brokers), so recovery neither drops an advertisement nor skips the
/// hold of a disable in progress.
fn served_mode(i: &Input<'_>, gateways_active: bool) -> DiscoveryMode {
    let served = |t: ConditionType| {
        i.previous
            .condition(t.as_str())
            .is_some_and(|c| c.status == ConditionStatus::True && c.reason == "Advertised")
    };
    match i.obs.kodo.discovery_template_mode {
        Some(m) => m,
        None if i.obs.discovery.is_none()
            && gateways_active
            && if i.spec.kodo_compatibility.enabled {
                served(C::KodoGatewaysAdvertised)
            } else {
                !served(C::KodoDirectBrokersAdvertised)
            } =>
        {
            DiscoveryMode::Kodo
        }
        None => DiscoveryMode::Direct,
    }
}

/// The mode discovery should run and the one its Service selects. Legacy unlabeled discovery
/// Pods (or a selector without a mode) are labelled in their current mode first, the
/// selector kept broad while they roll and pinned to that mode once every Pod carries the
/// label — before any mode change.
fn route_discovery(i: &Input<'_>, current_mode: DiscoveryMode, out: &mut Cutover) {
    let kodo = &i.obs.kodo;
    let enabled = out.enabled;
    let need = needed(i);
    let deployment = i.obs.discovery.as_ref();
    let adopting = deployment.is_some() && kodo.discovery_route.is_none();
    let adopted = kodo.discovery_template_mode.is_some()
        && deployment.is_some_and(|d| d.unavailable().is_none())
        && kodo
            .discovery_pods
            .iter()
            .all(|p| p.mode == kodo.discovery_template_mode)
        && ready_in(i, current_mode) >= need;
    out.holding_discovery = !enabled
        && out.gateways_active
        && current_mode == DiscoveryMode::Kodo
        && !i.target_brokers_ready;
    let target = if adopting {
        current_mode
    } else if enabled {
        if current_mode == DiscoveryMode::Kodo || out.gateways_ready() {
            DiscoveryMode::Kodo
        } else {
            DiscoveryMode::Direct
        }
    } else if out.holding_discovery {
        DiscoveryMode::Kodo
    } else {
        DiscoveryMode::Direct
    };
    let route = if deployment.is_none() {
        Some(target)
    } else if adopting {
        adopted.then_some(current_mode)
    } else if ready_in(i, target) >= need {
        Some(target)
    } else if kodo.discovery_route == Some(target) && ready_in(i, target.other()) >= need {
        // the new mode failed its soak: back to the Pods that still serve the old one
        Some(target.other())
    } else {
        kodo.discovery_route
    };
    out.layout.discovery_mode = target;
    out.layout.route = route;
}

/// Which mode is advertised, since when, and the producer-restart baseline.
fn advertisement_fences(i: &Input<'_>, out: &mut Cutover) {
    let k = &i.spec.kodo_compatibility;
    let need = needed(i);
    let (target, route) = (out.layout.discovery_mode, out.layout.route);
    out.advertised = out.enabled
        && target == DiscoveryMode::Kodo
        && route == Some(DiscoveryMode::Kodo)
        && ready_in(i, DiscoveryMode::Kodo) >= need;
    if out.advertised {
        out.advertised_for =
            held_for(i.previous, C::KodoGatewaysAdvertised, "Advertised", i.now).unwrap_or(0);
        let baseline = i
            .previous
            .kodo_producer_restart_baseline_nonce
            .clone()
            .unwrap_or_else(|| k.producer_restart_nonce.clone());
        out.restart_confirmed = baseline != k.producer_restart_nonce;
        out.baseline = Some(baseline);
    }
    out.direct_advertised = target == DiscoveryMode::Direct
        && route == Some(DiscoveryMode::Direct)
        && ready_in(i, DiscoveryMode::Direct) >= need;
    if out.direct_advertised {
        out.direct_for = held_for(
            i.previous,
            C::KodoDirectBrokersAdvertised,
            "Advertised",
            i.now,
        )
        .unwrap_or(0);
    }
}

/// Whether the Gateways run, are retained or go, and whether brokers may be disrupted.
fn gateways_fate(i: &Input<'_>, out: &mut Cutover) {
    let k = &i.spec.kodo_compatibility;
    let (enabled, gateways_active) = (out.enabled, out.gateways_active);
    let gw = i.obs.kodo.gateways.as_ref();
    let current_brokers = i.obs.statefulset_replicas.unwrap_or(0);
    let wanted = enabled && (gateways_active || (current_brokers >= 2 && i.ready_brokers >= 2));
    // Confirmation lets the decommission start; the Gateways still stay until the direct
    // brokers were advertised for the whole grace, so every Kodo producer refreshed /nodes
    // (twice) and moved to the brokers before its Gateway identities stop answering.
    out.retained =
        !enabled && gateways_active && !(out.direct_advertised && out.direct_for >= i.grace);
    out.layout.gateway_replicas = if wanted || out.retained {
        Some(GATEWAYS)
    } else if enabled && gw.is_some() {
        Some(0)
    } else {
        None
    };
    // Removed = every object the operator created for them deleted, the StatefulSet last; an
    // empty StatefulSet an older operator left behind goes the same way.
    out.delete_gateways = out.layout.gateway_replicas.is_none() && gw.is_some_and(|g| g.owned);
    out.disruptions_allowed = if enabled {
        out.gates_hold()
    } else if gateways_active && out.direct_advertised {
        k.decommission_confirmed || out.direct_for >= i.grace
    } else {
        true
    };
}

/// The phase when the operations engine found nothing to do (`Ready`) or waited for the fences
/// (`WaitingForKodoCutover`): which Kodo gate is still open.
pub fn overlay(c: &Cutover, phase: Phase) -> Option<(Phase, String)> {
    if !matches!(phase, Phase::Ready | Phase::WaitingForKodoCutover) {
        return None;
    }
    if c.enabled {
        if !c.gateways_ready() {
            return Some((
                Phase::WaitingForKodoGateways,
                format!(
                    "{} of {GATEWAYS} Kodo Gateways Ready on the latest revision; brokers are not disrupted before all are",
                    c.gateways_ready_count
                ),
            ));
        }
        if !c.advertised {
            return Some((
                Phase::WaitingForKodoAdvertisement,
                "waiting for every Kodo-mode discovery Pod to be Ready and the discovery Service to select them".into(),
            ));
        }
        if !c.grace_elapsed() {
            return Some((
                Phase::WaitingForKodoCutover,
                format!(
                    "Kodo Gateways advertised for {}s of the {}s cutover grace (Kodo producers refresh /nodes in that time)",
                    c.advertised_for, c.grace
                ),
            ));
        }
        if !c.restart_confirmed {
            return Some((
                Phase::WaitingForKodoProducerRestart,
                format!(
                    "restart every Kodo producer, then change spec.kodoCompatibility.producerRestartNonce (now {:?}); brokers are not disrupted before",
                    c.baseline.as_deref().unwrap_or_default()
                ),
            ));
        }
        return None;
    }
    if c.retained {
        let why = if c.holding_discovery {
            "waiting for every broker to run the non-Kodo config before discovery advertises them again".to_string()
        } else if !c.direct_advertised {
            "waiting for direct-mode discovery Pods to be Ready and selected (direct advertisement)"
                .to_string()
        } else {
            format!(
                "direct brokers advertised for {}s of the {}s grace",
                c.direct_for, c.grace
            )
        };
        return Some((
            Phase::DisablingKodo,
            format!("disabling the Kodo profile, Kodo Gateways retained: {why}"),
        ));
    }
    None
}

/// The message of `KodoDecommissionBlocked`.
pub const DECOMMISSION_BLOCKED: &str = "spec.kodoCompatibility.enabled is false but the Kodo Gateways still run: set spec.kodoCompatibility.decommissionConfirmed to true once no Kodo producer needs them (or set enabled back to true); nothing changes until then";

/// The conditions of the decommission gate (the other Kodo conditions keep their values).
pub fn blocked_conditions() -> Vec<ConditionSpec> {
    vec![
        cond(
            C::KodoGatewaysActive,
            true,
            "RetainedForSafety",
            "the Kodo Gateways run until the decommission is confirmed",
        ),
        cond(
            C::KodoDecommissionConfirmed,
            false,
            "ConfirmationRequired",
            DECOMMISSION_BLOCKED,
        ),
    ]
}

/// The eight Kodo conditions.
pub fn conditions(c: &Cutover, decommission_confirmed: bool) -> Vec<ConditionSpec> {
    vec![
        gateways_active(c),
        gateways_ready(c),
        gateways_advertised(c),
        cutover_ready(c),
        producer_restart(c),
        direct_advertised(c),
        cleanup(c),
        decommission(c, decommission_confirmed),
    ]
}

fn disabled(t: ConditionType) -> ConditionSpec {
    cond(t, false, "Disabled", "the Kodo profile is off")
}

/// `KodoGatewaysActive`: the Gateways run (or are retained while disabling).
fn gateways_active(c: &Cutover) -> ConditionSpec {
    let on = c.enabled;
    match (on, c.gateways_active) {
        (true, true) => cond(
            C::KodoGatewaysActive,
            true,
            "Active",
            "the Kodo Gateways run",
        ),
        (true, false) => cond(
            C::KodoGatewaysActive,
            false,
            "WaitingForBrokers",
            "the Kodo Gateways start once two brokers are Ready",
        ),
        (false, true) => cond(
            C::KodoGatewaysActive,
            true,
            "RetainedForSafety",
            "the profile is off; the Kodo Gateways are kept until direct advertisement",
        ),
        (false, false) => disabled(C::KodoGatewaysActive),
    }
}

/// `KodoGatewaysReady`: all three Gateways Ready on the rendered template.
fn gateways_ready(c: &Cutover) -> ConditionSpec {
    let on = c.enabled;
    if !on && !c.gateways_active {
        disabled(C::KodoGatewaysReady)
    } else if c.gateways_ready() {
        cond(
            C::KodoGatewaysReady,
            true,
            "AllReady",
            &format!("{GATEWAYS} of {GATEWAYS} Kodo Gateways Ready"),
        )
    } else {
        cond(
            C::KodoGatewaysReady,
            false,
            "PodsUnavailable",
            &format!(
                "{} of {GATEWAYS} Kodo Gateways Ready on the latest revision",
                c.gateways_ready_count
            ),
        )
    }
}

/// `KodoGatewaysAdvertised`: discovery lists the Gateways in `/nodes`.
fn gateways_advertised(c: &Cutover) -> ConditionSpec {
    let on = c.enabled;
    if !on {
        disabled(C::KodoGatewaysAdvertised)
    } else if c.advertised {
        cond(
            C::KodoGatewaysAdvertised,
            true,
            "Advertised",
            "discovery's /nodes lists the Kodo Gateways",
        )
    } else {
        cond(
            C::KodoGatewaysAdvertised,
            false,
            "WaitingForGateways",
            "discovery still lists the brokers in /nodes",
        )
    }
}

/// `KodoCutoverReady`: the advertisement held for the grace.
fn cutover_ready(c: &Cutover) -> ConditionSpec {
    let on = c.enabled;
    if !on {
        disabled(C::KodoCutoverReady)
    } else if c.grace_elapsed() {
        cond(
            C::KodoCutoverReady,
            true,
            "DiscoveryGraceElapsed",
            &format!("the Kodo Gateways were advertised for {}s", c.grace),
        )
    } else {
        cond(
            C::KodoCutoverReady,
            false,
            "WaitingForDiscoveryGrace",
            &format!("advertised for {}s of {}s", c.advertised_for, c.grace),
        )
    }
}

/// `KodoProducerRestartConfirmed`: the nonce changed after the advertisement.
fn producer_restart(c: &Cutover) -> ConditionSpec {
    let on = c.enabled;
    if !on {
        disabled(C::KodoProducerRestartConfirmed)
    } else if !c.advertised {
        cond(
            C::KodoProducerRestartConfirmed,
            false,
            "WaitingForAdvertisement",
            "a producer restart counts only after the Kodo Gateways are advertised",
        )
    } else if c.restart_confirmed {
        cond(
            C::KodoProducerRestartConfirmed,
            true,
            "NonceChangedAfterAdvertisement",
            "spec.kodoCompatibility.producerRestartNonce changed after advertisement",
        )
    } else {
        cond(
            C::KodoProducerRestartConfirmed,
            false,
            "WaitingForRestart",
            &format!(
                "restart every Kodo producer, then change spec.kodoCompatibility.producerRestartNonce (now {:?})",
                c.baseline.as_deref().unwrap_or_default()
            ),
        )
    }
}

/// `KodoDirectBrokersAdvertised`: discovery lists the brokers again.
fn direct_advertised(c: &Cutover) -> ConditionSpec {
    let on = c.enabled;
    if on {
        cond(
            C::KodoDirectBrokersAdvertised,
            false,
            "GatewayMode",
            "the Kodo profile is on",
        )
    } else if c.direct_advertised {
        cond(
            C::KodoDirectBrokersAdvertised,
            true,
            "Advertised",
            "discovery's /nodes lists the brokers",
        )
    } else {
        cond(
            C::KodoDirectBrokersAdvertised,
            false,
            "WaitingForSafeInventory",
            "discovery does not list the brokers yet",
        )
    }
}

/// `KodoCleanupActive`: never (cleanup is off for good).
fn cleanup(c: &Cutover) -> ConditionSpec {
    let on = c.enabled;
    if on {
        cond(
            C::KodoCleanupActive,
            false,
            "NotRequested",
            "Kodo channel cleanup is permanently off",
        )
    } else {
        disabled(C::KodoCleanupActive)
    }
}

/// `KodoDecommissionConfirmed`: disabling was confirmed.
fn decommission(c: &Cutover, decommission_confirmed: bool) -> ConditionSpec {
    let on = c.enabled;
    if on {
        cond(
            C::KodoDecommissionConfirmed,
            false,
            "CompatibilityActive",
            "the Kodo profile is on",
        )
    } else if c.gateways_active && decommission_confirmed {
        cond(
            C::KodoDecommissionConfirmed,
            true,
            "Confirmed",
            "spec.kodoCompatibility.decommissionConfirmed is true",
        )
    } else {
        cond(
            C::KodoDecommissionConfirmed,
            false,
            "NotRequired",
            "no Kodo Gateway runs",
        )
    }
}

#[cfg(test)]
mod tests;
