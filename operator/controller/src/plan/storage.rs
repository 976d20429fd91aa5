//! Storage readiness from the broker PVCs: are they bound, of the right class and size?
//! Nothing here mutates a claim; PVC growth is a later operation.

use super::Claim;
use super::quantity::parse_bytes;

/// What the claims say about storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageState {
    /// Every claim is bound with the requested class and at least the requested size.
    Ready,
    /// Claims are being provisioned or grown; nothing for the user to do.
    Pending(String),
    /// A claim contradicts the spec; the user must act.
    Blocked(String),
}

/// Judge the claims of ordinals `< replicas` against the spec's class and size.
pub fn storage_state(claims: &[Claim], class: &str, size: &str) -> StorageState {
    let Some(want) = parse_bytes(size) else {
        return StorageState::Blocked(format!("spec.storageSize {size:?} is not a quantity"));
    };
    let mut pending = Vec::new();
    for c in claims {
        if c.storage_class.as_deref().is_some_and(|sc| sc != class) {
            return StorageState::Blocked(format!(
                "PVC {} uses StorageClass {}, spec.storageClassName is {class}: a claim's class cannot change",
                c.name,
                c.storage_class.as_deref().unwrap_or_default()
            ));
        }
        let requested = c.requested.as_deref().and_then(parse_bytes);
        if requested.is_some_and(|r| r > want) {
            return StorageState::Blocked(format!(
                "PVC {} requests more than spec.storageSize {size}: storage shrink is forbidden, set storageSize back",
                c.name
            ));
        }
        let capacity = c.capacity.as_deref().and_then(parse_bytes);
        if !c.bound || capacity.is_none_or(|cap| cap < want) {
            pending.push(c.name.clone());
        }
    }
    if pending.is_empty() {
        StorageState::Ready
    } else {
        StorageState::Pending(format!(
            "waiting for PVCs to be bound with {size}: {}",
            pending.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, class: &str, req: &str, cap: Option<&str>, bound: bool) -> Claim {
        Claim {
            name: name.into(),
            storage_class: Some(class.into()),
            requested: Some(req.into()),
            capacity: cap.map(str::to_string),
            bound,
        }
    }

    #[test]
    fn storage_states_follow_the_claims() {
        let ok = claim("data-q-0", "local", "1Gi", Some("1Gi"), true);
        type Case = (Vec<Claim>, &'static str, fn(&StorageState) -> bool);
        let cases: Vec<Case> = vec![
            (vec![], "no claims yet is fine", |s| {
                *s == StorageState::Ready
            }),
            (vec![ok.clone()], "bound at size", |s| {
                *s == StorageState::Ready
            }),
            (
                vec![claim("data-q-0", "local", "1Gi", Some("2Gi"), true)],
                "bigger volume than asked",
                |s| *s == StorageState::Ready,
            ),
            (
                vec![ok.clone(), claim("data-q-1", "local", "1Gi", None, false)],
                "unbound claim is pending",
                |s| matches!(s, StorageState::Pending(m) if m.contains("data-q-1") && !m.contains("data-q-0")),
            ),
            (
                vec![claim("data-q-0", "other", "1Gi", Some("1Gi"), true)],
                "class mismatch blocks",
                |s| matches!(s, StorageState::Blocked(m) if m.contains("StorageClass other")),
            ),
            (
                vec![claim("data-q-0", "local", "2Gi", Some("2Gi"), true)],
                "shrink blocks",
                |s| matches!(s, StorageState::Blocked(m) if m.contains("shrink is forbidden")),
            ),
            (
                vec![claim("data-q-0", "local", "512Mi", Some("512Mi"), true)],
                "growth is pending",
                |s| matches!(s, StorageState::Pending(_)),
            ),
        ];
        for (claims, what, check) in cases {
            let st = storage_state(&claims, "local", "1Gi");
            assert!(check(&st), "{what}: {st:?}");
        }
    }
}
