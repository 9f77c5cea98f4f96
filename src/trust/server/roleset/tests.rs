//! Role sets as a publisher builds them (`publish::plan`) and as the server judges them,
//! flat and binned, with small limits so a handful of targets exercises every layout.

use tough::schema::{DelegatedTargets, KeyHolder, Snapshot};

use super::*;
use crate::catalog::builtin;
use crate::definition::Definition;
use crate::trust::SigningKey;
use crate::trust::metadata::{SPEC_VERSION, metafile, sign, target_name, version};
use crate::trust::publisher::plan::{Change, Current, Limits, Plan, delegations_for, plan};
use crate::trust::verify::{RoleLifetimes, check_publish, check_resign, check_yank};

/// Within the default role lifetimes (7 to 730 days).
const LIFETIME: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);
const NOW: i64 = 1_790_000_000;
const SMALL: Limits = Limits {
    flat_max: 3,
    bin_max: 2,
};

/// `n` versions of the built-in gateway: distinct targets with valid bytes.
fn defs(n: usize) -> Vec<Definition> {
    let base = &builtin::definitions().unwrap()[0];
    let yaml = String::from_utf8(base.bytes.clone()).unwrap();
    let line = yaml
        .lines()
        .find(|l| l.trim_start().starts_with("version:"))
        .unwrap()
        .to_owned();
    (0..n)
        .map(|i| {
            let indent = &line[..line.len() - line.trim_start().len()];
            Definition::parse(
                yaml.replace(&line, &format!("{indent}version: 7.0.{i}"))
                    .as_bytes(),
            )
            .unwrap()
        })
        .collect()
}

/// The server's view of one publisher `acme`: registration, snapshot, current roles.
struct Repo {
    key: SigningKey,
    keys: Vec<PublicKey>,
    threshold: u64,
    delegations: Delegations,
    snapshot: Snapshot,
    current: CurrentRoles,
}

impl Repo {
    fn new() -> Repo {
        let key = SigningKey::generate().unwrap();
        let keys = vec![key.public()];
        Repo {
            delegations: delegations_for("acme", &keys, 1).unwrap(),
            key,
            keys,
            threshold: 1,
            snapshot: Snapshot::new(
                SPEC_VERSION.into(),
                version(1),
                jiff::Timestamp::from_second(NOW + 86_400).unwrap(),
            ),
            current: CurrentRoles::default(),
        }
    }

    fn who(&self) -> Registered<'_> {
        Registered {
            publisher: "acme",
            keys: &self.keys,
            threshold: self.threshold,
            delegations: &self.delegations,
        }
    }

    /// What `marketplace publish/yank/resign` would upload, signed with `keys`.
    async fn build(&self, change: &Change<'_>, keys: &[&SigningKey], limits: Limits) -> RoleUpload {
        let mut current = Current {
            top: self.current.top.clone(),
            bins: Default::default(),
        };
        loop {
            match plan("acme", &current, change, keys, LIFETIME, NOW, limits)
                .await
                .unwrap()
            {
                Plan::Fetch(names) => {
                    for n in names {
                        current
                            .add_bin(&n, &serde_json::to_vec(&self.current.bins[&n]).unwrap())
                            .unwrap();
                    }
                }
                Plan::Ready(u) => {
                    return RoleUpload {
                        top: u.top,
                        bins: u.bins,
                    };
                }
                Plan::AlreadyPublished => panic!("nothing to upload"),
            }
        }
    }

    fn verify(&self, upload: &RoleUpload) -> Result<Verified, PublishError> {
        verify_set(
            &self.who(),
            &self.snapshot,
            &self.current,
            upload,
            NOW,
            &RoleLifetimes::default(),
        )
    }

    /// Stores a verified upload: what `accept` does with the database.
    fn commit(&mut self, v: Verified) {
        for (name, role, bytes) in v.roles {
            self.snapshot.meta.insert(
                format!("{name}.json"),
                metafile(role.signed.version.get(), &bytes),
            );
            if name == "acme" {
                self.current.top = Some(role);
            } else {
                self.current.bins.insert(name, role);
            }
        }
    }

    async fn publish(&self, defs: &[Definition], limits: Limits) -> Verified {
        let adding = defs.iter().map(|d| (d, false)).collect();
        let upload = self.build(&Change::Add(adding), &[&self.key], limits).await;
        let v = self.verify(&upload).expect("a well-formed publish");
        check_publish("acme", &v.old, &v.new, defs.to_vec()).expect("adds exactly the definitions");
        v
    }

    fn layout(&self) -> Layout {
        bins::layout(
            "acme",
            &self.current.top.as_ref().unwrap().signed,
            &self.keys,
            1,
        )
        .unwrap()
    }
}

/// A role signed by the repo's key after hand edits.
async fn signed(name: &str, role: Targets, key: &SigningKey) -> Vec<u8> {
    let holder = KeyHolder::Delegations(delegations_for(name, &[key.public()], 1).unwrap());
    let targets = DelegatedTargets {
        name: name.into(),
        targets: role,
    };
    sign(targets, &holder, &[key])
        .await
        .unwrap()
        .buffer()
        .clone()
}

#[tokio::test]
async fn flat_publishes_and_each_bad_upload() {
    let mut repo = Repo::new();
    let d = defs(3);
    let v = repo.publish(&d[..1], Limits::default()).await;
    assert_eq!((v.top_version, v.new.len(), v.old.len()), (1, 1, 0));
    repo.commit(v);
    let good = repo
        .build(
            &Change::Add(vec![(&d[1], false)]),
            &[&repo.key],
            Limits::default(),
        )
        .await;
    let v = repo.verify(&good).unwrap();
    assert!(check_publish("acme", &v.old, &v.new, d[1..2].to_vec()).is_ok());
    // Bytes that do not match: the role adds d[1], the upload says d[2].
    assert!(matches!(
        check_publish("acme", &v.old, &v.new, d[2..3].to_vec()),
        Err(PublishError::WrongTargets { .. })
    ));

    // A key the publisher does not have.
    let rogue = SigningKey::generate().unwrap();
    let bad = repo
        .build(
            &Change::Add(vec![(&d[1], false)]),
            &[&rogue],
            Limits::default(),
        )
        .await;
    assert!(
        matches!(repo.verify(&bad), Err(PublishError::Signature { ref role, .. }) if role == "acme")
    );

    // Below threshold: 2 of 2 registered keys needed, one signs.
    let second = SigningKey::generate().unwrap();
    let mut two = Repo::new();
    two.keys = vec![two.key.public(), second.public()];
    two.threshold = 2;
    two.delegations = delegations_for("acme", &two.keys, 2).unwrap();
    let one = two
        .build(
            &Change::Add(vec![(&d[0], false)]),
            &[&two.key],
            Limits::default(),
        )
        .await;
    assert!(matches!(
        two.verify(&one),
        Err(PublishError::Signature { threshold: 2, .. })
    ));

    // A replay of version 1.
    let mut replay = repo.current.top.clone().unwrap().signed;
    replay.targets.clear();
    let replay = RoleUpload {
        top: Some(signed("acme", replay, &repo.key).await),
        bins: Default::default(),
    };
    assert!(matches!(
        repo.verify(&replay),
        Err(PublishError::Stale {
            got: 1,
            current: 1,
            ..
        })
    ));

    // A target outside acme/*/*, and a removed target.
    let mut role = repo.current.top.clone().unwrap().signed;
    role.version = version(2);
    role.targets.insert(
        tough::TargetName::new("beta/x/1.0.0.yaml").unwrap(),
        crate::trust::metadata::target(&d[1], false),
    );
    let outside = RoleUpload {
        top: Some(signed("acme", role.clone(), &repo.key).await),
        bins: Default::default(),
    };
    assert!(matches!(
        repo.verify(&outside),
        Err(PublishError::OutsidePath { .. })
    ));
    role.targets.clear();
    let removed = RoleUpload {
        top: Some(signed("acme", role, &repo.key).await),
        bins: Default::default(),
    };
    let v = repo.verify(&removed).unwrap();
    assert!(matches!(
        check_resign(&v.old, &v.new),
        Err(PublishError::Immutable { .. })
    ));

    // Expired on arrival, and not JSON at all.
    let mut role = repo.current.top.clone().unwrap().signed;
    role.version = version(2);
    role.expires = jiff::Timestamp::from_second(NOW - 1).unwrap();
    let expired = RoleUpload {
        top: Some(signed("acme", role, &repo.key).await),
        bins: Default::default(),
    };
    assert!(matches!(
        repo.verify(&expired),
        Err(PublishError::Expiry { .. })
    ));
    // Valid, but for too short or too long (the operator's policy, 7 to 730 days).
    for (days, short) in [(6, true), (731, false)] {
        let mut role = repo.current.top.clone().unwrap().signed;
        role.version = version(2);
        role.expires = jiff::Timestamp::from_second(NOW + days * 86_400).unwrap();
        let upload = RoleUpload {
            top: Some(signed("acme", role, &repo.key).await),
            bins: Default::default(),
        };
        let err = repo.verify(&upload).unwrap_err();
        assert!(matches!(err, PublishError::Lifetime { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("in {days} days"))
                && text.contains("between 7 days and 730 days"),
            "{short}: {text}"
        );
    }
    let garbage = RoleUpload {
        top: Some(b"{".to_vec()),
        bins: Default::default(),
    };
    assert!(matches!(
        repo.verify(&garbage),
        Err(PublishError::Metadata(
            crate::trust::envelope::EnvelopeError::Malformed { .. }
        ))
    ));
    assert!(matches!(
        repo.verify(&RoleUpload::default()),
        Err(PublishError::NoRole)
    ));
    // Bins beside a flat role.
    let mut with_bin = good.clone();
    with_bin.bins.insert("acme.0".into(), b"{}".to_vec());
    assert!(matches!(
        repo.verify(&with_bin),
        Err(PublishError::BadBins(_))
    ));
}

#[tokio::test]
async fn grows_into_bins_then_longer_prefixes() {
    let mut repo = Repo::new();
    let d = defs(40);
    let v = repo.publish(&d[..3], SMALL).await;
    repo.commit(v);
    assert_eq!(repo.layout(), Layout::Flat);

    // The fourth target passes flat_max: a binned top with every bin (16).
    let v = repo.publish(&d[3..4], SMALL).await;
    assert_eq!(v.roles.len(), 1 + 16);
    assert_eq!((v.old.len(), v.new.len()), (3, 4));
    repo.commit(v);
    assert_eq!(repo.layout(), Layout::Binned { prefix_len: 1 });

    // Next publishes touch only their bins, until one passes bin_max.
    let mut i = 4;
    loop {
        let v = repo.publish(&d[i..i + 1], SMALL).await;
        i += 1;
        let rebinned = v.roles.iter().any(|(n, ..)| n == "acme");
        if rebinned {
            assert_eq!(v.roles.len(), 1 + 256, "every two-digit bin");
            assert_eq!(v.new.len(), i);
            repo.commit(v);
            break;
        }
        assert_eq!(v.roles.len(), 1, "one bin re-signed");
        assert_eq!(v.new.len() - v.old.len(), 1);
        repo.commit(v);
        assert!(i < 40, "16 bins of at most 2 hold at most 32 targets");
    }
    assert_eq!(repo.layout(), Layout::Binned { prefix_len: 2 });
    // Old one-digit bins stay listed (clients refuse a snapshot that drops a role).
    assert!(repo.snapshot.meta.contains_key("acme.0.json"));

    // A yank re-signs the one bin holding the target.
    let name = target_name("acme", &d[0]);
    let upload = repo
        .build(&Change::Yank(vec![name.clone()]), &[&repo.key], SMALL)
        .await;
    assert!(upload.top.is_none());
    assert_eq!(upload.bins.len(), 1);
    let v = repo.verify(&upload).unwrap();
    assert_eq!(check_yank(&v.old, &v.new).unwrap(), vec![name]);
    repo.commit(v);

    // A re-sign renews every role with the same targets.
    let upload = repo.build(&Change::Resign, &[&repo.key], SMALL).await;
    assert_eq!(upload.bins.len(), 256);
    let v = repo.verify(&upload).unwrap();
    assert_eq!(v.old.len(), i);
    check_resign(&v.old, &v.new).unwrap();
    repo.commit(v);
    assert_eq!(repo.current.top.as_ref().unwrap().signed.version.get(), 4);
}

#[tokio::test]
async fn refuses_malformed_binned_uploads() {
    let mut repo = Repo::new();
    let d = defs(6);
    let v = repo.publish(&d[..4], SMALL).await;
    repo.commit(v);
    let top = repo.current.top.clone().unwrap();

    // A new binned top without all of its bins.
    let mut partial = repo.build(&Change::Resign, &[&repo.key], SMALL).await;
    partial.bins.remove("acme.7");
    assert!(
        matches!(repo.verify(&partial), Err(e @ PublishError::BadBins(BinsError::MissingBin { .. })) if e.to_string().contains("acme.7 is missing"))
    );

    let add = repo
        .build(&Change::Add(vec![(&d[4], false)]), &[&repo.key], SMALL)
        .await;
    let (bin, bytes) = add.bins.iter().next().unwrap();
    // A bin the role does not delegate.
    let foreign = RoleUpload {
        top: None,
        bins: [("acme.00".to_owned(), bytes.clone())].into(),
    };
    assert!(matches!(
        repo.verify(&foreign),
        Err(PublishError::NotABin { .. })
    ));

    // A target placed in the wrong bin.
    let role: Signed<Targets> = serde_json::from_slice(bytes).unwrap();
    let wrong = bins::prefixes(1)
        .into_iter()
        .map(|p| bins::bin_name("acme", &p))
        .find(|n| n != bin)
        .unwrap();
    let current_version = repo.current.bins[&wrong].signed.version.get();
    let mut moved = role.signed.clone();
    moved.version = version(current_version + 1);
    let misplaced = RoleUpload {
        top: None,
        bins: [(wrong.clone(), signed(&wrong, moved, &repo.key).await)].into(),
    };
    assert!(
        matches!(repo.verify(&misplaced), Err(e @ PublishError::BadBins(BinsError::Misplaced { .. })) if e.to_string().contains("belongs in bin"))
    );

    // A bin signed by another key than its delegation names.
    let rogue = SigningKey::generate().unwrap();
    let forged = RoleUpload {
        top: None,
        bins: [(bin.clone(), signed(bin, role.signed.clone(), &rogue).await)].into(),
    };
    assert!(
        matches!(repo.verify(&forged), Err(PublishError::Signature { ref role, .. }) if role == bin)
    );

    // A bin that delegates further.
    let mut nested = role.signed.clone();
    nested.delegations = top.signed.delegations.clone();
    let nested = RoleUpload {
        top: None,
        bins: [(bin.clone(), signed(bin, nested, &repo.key).await)].into(),
    };
    assert!(matches!(
        repo.verify(&nested),
        Err(PublishError::NestedDelegation)
    ));

    // After a key rotation the current top names unregistered keys: bins alone are
    // refused with the way out; a re-sign with the new key is accepted.
    let new_key = SigningKey::generate().unwrap();
    repo.keys = vec![new_key.public()];
    repo.delegations = delegations_for("acme", &repo.keys, 1).unwrap();
    assert!(
        matches!(repo.verify(&add), Err(e @ PublishError::BadBins(BinsError::KeysNoLongerRegistered { .. })) if e.to_string().contains("marketplace resign"))
    );
    let moved = repo.build(&Change::Resign, &[&new_key], SMALL).await;
    let v = repo.verify(&moved).unwrap();
    check_resign(&v.old, &v.new).unwrap();
}
