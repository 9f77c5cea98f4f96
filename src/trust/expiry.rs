//! When publishers' roles expire, shown before it bites. Every TUF client refuses an
//! expired role, so a publisher that forgets to renew (`marketplace resign`) loses its
//! plugins on every worker; the operator's index page, `publisher list`, the publisher
//! API and the server log all warn [`WARN_WITHIN`] ahead.

use std::collections::HashMap;

/// How long before expiry a role is flagged.
pub const WARN_WITHIN: i64 = 30 * 86_400;
/// How often the server log repeats a warning about one role version.
const LOG_EVERY: i64 = 86_400;

/// One delegated publisher role or bin of the current index.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RoleExpiry {
    pub publisher: String,
    /// The role's name: the publisher's, or one of its bins (`PUBLISHER.PREFIX`).
    pub role: String,
    pub version: u64,
    pub expires_at: i64,
}

impl RoleExpiry {
    pub fn expired(&self, now: i64) -> bool {
        self.expires_at <= now
    }

    pub fn expiring_soon(&self, now: i64) -> bool {
        self.expires_at - now < WARN_WITHIN
    }
}

/// A role's expiry as the publisher API shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct RoleView {
    pub role: String,
    pub version: u64,
    pub expires_at: i64,
    /// RFC 3339, UTC.
    pub expires: String,
    pub expiring_soon: bool,
    pub expired: bool,
}

impl RoleExpiry {
    pub fn view(&self, now: i64) -> RoleView {
        RoleView {
            role: self.role.clone(),
            version: self.version,
            expires_at: self.expires_at,
            expires: jiff::Timestamp::from_second(self.expires_at)
                .map_or_else(|_| self.expires_at.to_string(), |t| t.to_string()),
            expiring_soon: self.expiring_soon(now),
            expired: self.expired(now),
        }
    }
}

/// The earliest-expiring role of each publisher.
pub fn earliest_by_publisher(roles: &[RoleExpiry]) -> HashMap<&str, &RoleExpiry> {
    let mut out: HashMap<&str, &RoleExpiry> = HashMap::new();
    for r in roles {
        out.entry(&r.publisher)
            .and_modify(|e| {
                if r.expires_at < e.expires_at {
                    *e = r;
                }
            })
            .or_insert(r);
    }
    out
}

/// Server log warnings about roles close to expiry, at most once a day per role version.
#[derive(Debug, Default)]
pub struct Warnings {
    last: HashMap<(String, u64), i64>,
}

impl Warnings {
    /// Logs what is due at `now`; returns the roles it warned about.
    pub fn log(&mut self, roles: &[RoleExpiry], now: i64) -> Vec<String> {
        let mut warned = Vec::new();
        for r in roles.iter().filter(|r| r.expiring_soon(now)) {
            let key = (r.role.clone(), r.version);
            if self.last.get(&key).is_some_and(|t| now - t < LOG_EVERY) {
                continue;
            }
            self.last.insert(key, now);
            warned.push(r.role.clone());
            let expires = jiff::Timestamp::from_second(r.expires_at)
                .map_or_else(|_| r.expires_at.to_string(), |t| t.to_string());
            if r.expired(now) {
                tracing::error!(
                    publisher = %r.publisher, role = %r.role, version = r.version, %expires,
                    "publisher role has expired: clients refuse this publisher's plugins until it runs `marketplace resign` (or the operator suspends it)"
                );
            } else {
                tracing::warn!(
                    publisher = %r.publisher, role = %r.role, version = r.version, %expires,
                    in_ = %crate::clock::human_duration(r.expires_at - now),
                    "publisher role expires soon; the publisher renews it with `marketplace resign`"
                );
            }
        }
        // Forget roles no longer current, so the map stays as small as the index.
        let current: std::collections::HashSet<(&str, u64)> =
            roles.iter().map(|r| (r.role.as_str(), r.version)).collect();
        self.last
            .retain(|(role, version), _| current.contains(&(role.as_str(), *version)));
        warned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(role: &str, version: u64, expires_at: i64) -> RoleExpiry {
        RoleExpiry {
            publisher: role.split('.').next().unwrap().to_owned(),
            role: role.to_owned(),
            version,
            expires_at,
        }
    }

    #[test]
    fn warns_a_month_ahead_once_a_day_per_role_version() {
        let now = 1_000_000_000;
        let roles = vec![
            role("acme", 3, now + 5 * 86_400),
            role("acme.0", 7, now - 10),
            role("beta", 1, now + 300 * 86_400),
        ];
        let mut w = Warnings::default();
        assert_eq!(w.log(&roles, now), ["acme", "acme.0"]);
        assert!(
            w.log(&roles, now + 3600).is_empty(),
            "not again the same day"
        );
        assert_eq!(w.log(&roles, now + 86_400), ["acme", "acme.0"]);
        // A renewed role (next version, a year away) is not warned about.
        let renewed = vec![role("acme", 4, now + 365 * 86_400), roles[1].clone()];
        assert!(w.log(&renewed, now + 86_401).is_empty());
        assert_eq!(w.last.len(), 1, "forgets roles no longer current");
        assert!(RoleExpiry::expiring_soon(&roles[0], now) && !roles[0].expired(now));
        assert!(roles[1].expired(now));
    }
}
