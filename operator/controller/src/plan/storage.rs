//! Storage from the broker PVCs and the StorageClass: bound, of the right class, at least the
//! requested size? Claims only grow (StorageClass `allowVolumeExpansion`); a shrink or a class
//! change is refused and never touches a claim. PVCs are never deleted.

use super::model::{Claim, StorageClassState};
use super::quantity::parse_bytes;

/// What the claims say about storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageState {
    /// Every claim is bound with the requested class and at least the requested size.
    Ready,
    /// Claims are being provisioned (not bound yet); nothing for the user to do.
    Pending(String),
    /// Claims are growing to the requested size; `grow` still need their request raised.
    Resizing {
        /// What we wait for.
        message: String,
        /// Claims whose request is below the size.
        grow: Vec<String>,
    },
    /// A claim or the StorageClass contradicts the spec; the user must act.
    Blocked(String),
}

/// Judge the claims in use against the spec's class and size.
pub fn storage_state(
    claims: &[&Claim],
    class_state: StorageClassState,
    class: &str,
    size: &str,
) -> StorageState {
    let Some(want) = parse_bytes(size) else {
        return StorageState::Blocked(format!("spec.storageSize {size:?} is not a quantity"));
    };
    let allow_expansion = match class_state {
        StorageClassState::Missing => {
            return StorageState::Blocked(format!(
                "StorageClass {class} does not exist: create it (broker PVCs cannot be provisioned without it)"
            ));
        }
        StorageClassState::Present { allow_expansion } => allow_expansion,
    };
    let (mut grow, mut waiting, mut unbound) = (Vec::new(), Vec::new(), Vec::new());
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
                "PVC {} requests more than spec.storageSize {size}: storage shrink to {size} is forbidden, set storageSize back",
                c.name
            ));
        }
        let capacity = c.capacity.as_deref().and_then(parse_bytes);
        if requested.is_some_and(|r| r < want) {
            if !allow_expansion {
                return StorageState::Blocked(format!(
                    "StorageClass {class} does not allow volume expansion: PVC {} cannot grow to {size} (set allowVolumeExpansion: true on the class, or set storageSize back)",
                    c.name
                ));
            }
            grow.push(c.name.clone());
        } else if !c.bound {
            unbound.push(c.name.clone());
        } else if capacity.is_none_or(|cap| cap < want) {
            waiting.push(c.name.clone());
        }
    }
    if !grow.is_empty() || !waiting.is_empty() {
        let mut all = grow.clone();
        all.extend(waiting);
        StorageState::Resizing {
            message: format!("waiting for PVC expansion to {size}: {}", all.join(", ")),
            grow,
        }
    } else if !unbound.is_empty() {
        StorageState::Pending(format!(
            "waiting for PVCs to be bound: {}",
            unbound.join(", ")
        ))
    } else {
        StorageState::Ready
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
                |s| matches!(s, StorageState::Blocked(m) if m.contains("storage shrink to 1Gi is forbidden")),
            ),
            (
                vec![claim("data-q-0", "local", "512Mi", Some("512Mi"), true)],
                "a smaller claim grows",
                |s| matches!(s, StorageState::Resizing { grow, .. } if grow == &["data-q-0"]),
            ),
            (
                vec![claim("data-q-0", "local", "1Gi", Some("512Mi"), true)],
                "a grown request waits for the capacity",
                |s| matches!(s, StorageState::Resizing { grow, message } if grow.is_empty() && message.contains("waiting for PVC expansion to 1Gi: data-q-0")),
            ),
        ];
        let expandable = StorageClassState::Present {
            allow_expansion: true,
        };
        for (claims, what, check) in cases {
            let refs: Vec<&Claim> = claims.iter().collect();
            let st = storage_state(&refs, expandable, "local", "1Gi");
            assert!(check(&st), "{what}: {st:?}");
        }
    }

    #[test]
    fn a_missing_or_fixed_size_class_blocks_with_what_to_do() {
        let small = claim("data-q-0", "local", "512Mi", Some("512Mi"), true);
        let st = storage_state(&[], StorageClassState::Missing, "local", "1Gi");
        assert!(
            matches!(&st, StorageState::Blocked(m) if m.contains("StorageClass local does not exist")),
            "{st:?}"
        );
        let fixed = StorageClassState::Present {
            allow_expansion: false,
        };
        let st = storage_state(&[&small], fixed, "local", "1Gi");
        assert!(
            matches!(&st, StorageState::Blocked(m) if m.contains("does not allow volume expansion")),
            "{st:?}"
        );
        let at_size = claim("data-q-0", "local", "1Gi", Some("1Gi"), true);
        assert_eq!(
            storage_state(&[&at_size], fixed, "local", "1Gi"),
            StorageState::Ready
        );
    }
}
