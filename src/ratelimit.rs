//! Rate limits on failed token authentication, in memory, per server process. Knows
//! nothing of HTTP: the handlers that check publisher tokens and `/v2/` pull tokens ask
//! [`AuthLimiter::check`] first and report the outcome with [`AuthLimiter::failed`] or
//! [`AuthLimiter::succeeded`] (pull tokens name no publisher, so only the address
//! budget applies to them). Time is an argument so tests can move it.
//!
//! Two budgets of failures, each a token bucket:
//! - **per client address** (an IPv6 address counts by its /64, which one host
//!   usually holds whole): once spent, every token check from that address is refused
//!   before the token is looked at;
//! - **per publisher name**, against guessing spread over many addresses: once spent,
//!   token checks for that publisher are refused from every address that has not
//!   presented a valid token for it recently, so the publisher's own machines keep
//!   working through the attack.
//!
//! Successful authentications cost nothing. Tokens are 256 random bits, so the limits
//! do not make guessing any less hopeless; they stop the cheap flood (thousands of
//! database lookups a second) and the log noise, and bound what a weak, leaked-in-part
//! or mistyped token could expose.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A bucket of `burst` failures, refilled by one every `every`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub burst: u32,
    pub every: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Per client address. 10 at once, then one per 6 s (10 a minute): a person who
    /// mistypes a token a few times never meets it; a guesser gets 14,400 a day
    /// instead of 2,000 a second.
    pub address: Budget,
    /// Per publisher name. Refills three times faster than an address's budget, so one
    /// address alone (a misconfigured CI job) can never spend it and lock the
    /// publisher's new machines out; it takes guessing from several addresses.
    pub publisher: Budget,
    /// How long a valid token exempts its address from its publisher's limit.
    pub remember_success: Duration,
    /// Entries per table; the least informative go first when full, so an attacker
    /// with many addresses or names cannot grow memory without bound.
    pub max_entries: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            address: Budget {
                burst: 10,
                every: Duration::from_secs(6),
            },
            publisher: Budget {
                burst: 30,
                every: Duration::from_secs(2),
            },
            remember_success: Duration::from_secs(24 * 3600),
            max_entries: 16_384,
        }
    }
}

/// Why a token check is refused, and when trying again can succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limited {
    /// Too many failures from this address.
    Address { retry_after: Duration },
    /// Too many failures for this publisher, and this address has not authenticated
    /// for it recently.
    Publisher {
        publisher: String,
        retry_after: Duration,
    },
}

impl Limited {
    pub fn retry_after(&self) -> Duration {
        match self {
            Limited::Address { retry_after } | Limited::Publisher { retry_after, .. } => {
                *retry_after
            }
        }
    }
}

/// Which budgets a failure spent to the end (for a log line when limiting starts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exhausted {
    pub address: bool,
    pub publisher: bool,
}

/// The failure budgets of one server process. Share it (in `AppState`) across requests.
#[derive(Debug)]
pub struct AuthLimiter {
    limits: Limits,
    tables: Mutex<Tables>,
}

#[derive(Debug)]
struct Tables {
    addresses: Buckets<Option<IpAddr>>,
    publishers: Buckets<String>,
    /// Last valid token per (publisher, address).
    successes: HashMap<(String, Option<IpAddr>), Instant>,
}

impl Default for AuthLimiter {
    fn default() -> Self {
        AuthLimiter::new(Limits::default())
    }
}

impl AuthLimiter {
    pub fn new(limits: Limits) -> AuthLimiter {
        AuthLimiter {
            limits,
            tables: Mutex::new(Tables {
                addresses: Buckets::new(limits.address, limits.max_entries),
                publishers: Buckets::new(limits.publisher, limits.max_entries),
                successes: HashMap::new(),
            }),
        }
    }

    /// Whether a token check from `client` (for `publisher`, when the route names one)
    /// may go ahead. `None` is a client whose address is unknown; all of them share one
    /// budget.
    pub fn check(
        &self,
        client: Option<IpAddr>,
        publisher: Option<&str>,
        now: Instant,
    ) -> Result<(), Limited> {
        let client = group(client);
        let tables = self.tables();
        if let Some(retry_after) = tables.addresses.spent(&client, now) {
            return Err(Limited::Address { retry_after });
        }
        let Some(publisher) = publisher.filter(|p| trackable(p)) else {
            return Ok(());
        };
        if let Some(retry_after) = tables.publishers.spent(publisher, now)
            && !self.recently_succeeded(&tables, publisher, client, now)
        {
            return Err(Limited::Publisher {
                publisher: publisher.to_owned(),
                retry_after,
            });
        }
        Ok(())
    }

    /// A token check from `client` failed: no token, a malformed header, or a token
    /// that is unknown or revoked.
    pub fn failed(
        &self,
        client: Option<IpAddr>,
        publisher: Option<&str>,
        now: Instant,
    ) -> Exhausted {
        let client = group(client);
        let mut tables = self.tables();
        Exhausted {
            address: tables.addresses.spend(client, now),
            publisher: publisher
                .filter(|p| trackable(p))
                .is_some_and(|p| tables.publishers.spend(p.to_owned(), now)),
        }
    }

    /// `client` presented a valid token of `publisher`.
    pub fn succeeded(&self, client: Option<IpAddr>, publisher: &str, now: Instant) {
        let key = (publisher.to_owned(), group(client));
        let mut tables = self.tables();
        let table = &mut tables.successes;
        if !table.contains_key(&key) && table.len() >= self.limits.max_entries {
            let remember = self.limits.remember_success;
            table.retain(|_, at| now.saturating_duration_since(*at) < remember);
            if table.len() >= self.limits.max_entries {
                // Only valid tokens create entries, so this takes many real publishers
                // on many machines; the oldest successes matter least.
                let keep = self.limits.max_entries * 7 / 8;
                let mut times: Vec<Instant> = table.values().copied().collect();
                times.sort_unstable();
                let cutoff = times[times.len() - keep - 1];
                table.retain(|_, at| *at > cutoff);
            }
        }
        table.insert(key, now);
    }

    fn recently_succeeded(
        &self,
        tables: &Tables,
        publisher: &str,
        client: Option<IpAddr>,
        now: Instant,
    ) -> bool {
        tables
            .successes
            .get(&(publisher.to_owned(), client))
            .is_some_and(|at| now.saturating_duration_since(*at) < self.limits.remember_success)
    }

    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        // The tables hold no invariant a panic could break halfway.
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many entries each table holds: addresses, publishers, successes.
    pub fn entries(&self) -> (usize, usize, usize) {
        let t = self.tables();
        (
            t.addresses.due.len(),
            t.publishers.due.len(),
            t.successes.len(),
        )
    }
}

/// An IPv6 client counts by its /64 (one host or one customer line usually holds the
/// whole prefix, so counting single addresses would hand out 2^64 budgets); an
/// IPv4-mapped IPv6 address counts as the IPv4 address it is.
fn group(client: Option<IpAddr>) -> Option<IpAddr> {
    client.map(|ip| match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
        v4 => v4,
    })
}

/// Only names that could be a publisher's get a budget: the name comes from the URL,
/// and an attacker must not fill the table with kilobyte-long ones.
fn trackable(publisher: &str) -> bool {
    crate::definition::is_dns_label(publisher)
}

/// Token buckets kept as the time each one will be full again (the generic cell rate
/// algorithm): one instant per key, and a bucket that is full needs no entry at all.
#[derive(Debug)]
struct Buckets<K> {
    budget: Budget,
    max_entries: usize,
    /// When the bucket of each key is full again; a failure pushes it `every` later.
    due: HashMap<K, Instant>,
}

impl<K: Hash + Eq> Buckets<K> {
    fn new(budget: Budget, max_entries: usize) -> Self {
        Buckets {
            budget,
            max_entries,
            due: HashMap::new(),
        }
    }

    /// How long until `key` may fail once more, when its budget is spent now.
    fn spent<Q>(&self, key: &Q, now: Instant) -> Option<Duration>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let due = *self.due.get(key)?;
        // Spent when fewer than one failure's worth of the bucket is left.
        let tolerance = self.budget.every * self.budget.burst.saturating_sub(1);
        let free_at = due.checked_sub(tolerance)?;
        (free_at > now).then(|| free_at - now)
    }

    /// Records one failure; true when it spent the budget (the next check is refused).
    fn spend(&mut self, key: K, now: Instant) -> bool {
        if !self.due.contains_key(&key) && self.due.len() >= self.max_entries {
            self.make_room(now);
        }
        let due = self.due.entry(key).or_insert(now);
        *due = (*due).max(now) + self.budget.every;
        let tolerance = self.budget.every * self.budget.burst.saturating_sub(1);
        *due > now + tolerance
    }

    /// Drops every bucket that is full again (it holds nothing a fresh one would not);
    /// when that is not enough, the fullest eighth: the most-spent buckets, those of
    /// the keys under attack, are the ones worth keeping.
    fn make_room(&mut self, now: Instant) {
        self.due.retain(|_, due| *due > now);
        if self.due.len() < self.max_entries {
            return;
        }
        let keep = self.max_entries * 7 / 8;
        let mut dues: Vec<Instant> = self.due.values().copied().collect();
        dues.sort_unstable();
        let cutoff = dues[dues.len() - keep - 1];
        self.due.retain(|_, due| *due > cutoff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn an_address_gets_its_burst_then_one_failure_per_interval() {
        let l = AuthLimiter::default();
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        let t0 = Instant::now();
        for i in 0..10 {
            assert_eq!(
                l.check(a, None, t0),
                Ok(()),
                "failure {i} is within the burst"
            );
            let spent = l.failed(a, None, t0);
            assert_eq!(spent.address, i == 9, "{i}");
        }
        let refused = l.check(a, Some("acme"), t0).unwrap_err();
        assert_eq!(refused, Limited::Address { retry_after: 6 * S });
        assert_eq!(
            l.check(b, Some("acme"), t0),
            Ok(()),
            "other addresses are not limited"
        );
        // Refills one failure per 6 s, and no more.
        assert_eq!(
            l.check(a, None, t0 + 3 * S).unwrap_err().retry_after(),
            3 * S
        );
        assert_eq!(l.check(a, None, t0 + 6 * S), Ok(()));
        l.failed(a, None, t0 + 6 * S);
        assert!(l.check(a, None, t0 + 6 * S).is_err());
        // After a minute of quiet the whole burst is back.
        let later = t0 + 66 * S;
        for _ in 0..10 {
            assert_eq!(l.check(a, None, later), Ok(()));
            l.failed(a, None, later);
        }
        assert!(l.check(a, None, later).is_err());
    }

    #[test]
    fn successes_cost_nothing() {
        let l = AuthLimiter::default();
        let a = ip("192.0.2.1");
        let t0 = Instant::now();
        for _ in 0..1000 {
            assert_eq!(l.check(a, Some("acme"), t0), Ok(()));
            l.succeeded(a, "acme", t0);
        }
        assert_eq!(l.entries(), (0, 0, 1));
    }

    #[test]
    fn a_publisher_under_distributed_guessing_keeps_its_recent_addresses() {
        let l = AuthLimiter::default();
        let t0 = Instant::now();
        let home = ip("198.51.100.7");
        l.succeeded(home, "acme", t0);
        // 30 failures against acme from 6 addresses, 5 each: no address is limited.
        for i in 0..30 {
            let guesser = ip(&format!("203.0.113.{}", i % 6));
            assert_eq!(l.check(guesser, Some("acme"), t0), Ok(()), "{i}");
            l.failed(guesser, Some("acme"), t0);
        }
        let newcomer = ip("192.0.2.99");
        assert_eq!(
            l.check(newcomer, Some("acme"), t0),
            Err(Limited::Publisher {
                publisher: "acme".into(),
                retry_after: 2 * S
            })
        );
        assert!(l.check(ip("203.0.113.1"), Some("acme"), t0).is_err());
        // The address that authenticated recently, other publishers, and routes that
        // name no publisher are not affected.
        assert_eq!(l.check(home, Some("acme"), t0), Ok(()));
        assert_eq!(l.check(newcomer, Some("beta"), t0), Ok(()));
        assert_eq!(l.check(newcomer, None, t0), Ok(()));
        // "Recently" ends: a day later, with the attack still going, home is limited too.
        let day = t0 + Duration::from_secs(86_400);
        for i in 0..30 {
            l.failed(ip(&format!("203.0.113.{}", 10 + i % 6)), Some("acme"), day);
        }
        assert!(l.check(home, Some("acme"), day).is_err());
    }

    #[test]
    fn one_address_alone_cannot_spend_a_publishers_budget() {
        let l = AuthLimiter::default();
        let a = ip("192.0.2.1");
        let t0 = Instant::now();
        // As fast as its own budget allows, for ten minutes.
        let mut t = t0;
        while t < t0 + Duration::from_secs(600) {
            while l.check(a, Some("acme"), t).is_ok() {
                l.failed(a, Some("acme"), t);
            }
            t += S;
        }
        assert_eq!(l.check(ip("192.0.2.2"), Some("acme"), t), Ok(()));
    }

    #[test]
    fn ipv6_counts_by_its_64_prefix() {
        let l = AuthLimiter::default();
        let t0 = Instant::now();
        for i in 0..10 {
            l.failed(ip(&format!("2001:db8:1:2::{i:x}")), None, t0);
        }
        assert!(l.check(ip("2001:db8:1:2:ffff::1"), None, t0).is_err());
        assert_eq!(l.check(ip("2001:db8:1:3::1"), None, t0), Ok(()));
        // An IPv4-mapped address is the IPv4 address.
        for _ in 0..10 {
            l.failed(ip("::ffff:192.0.2.1"), None, t0);
        }
        assert!(l.check(ip("192.0.2.1"), None, t0).is_err());
    }

    #[test]
    fn unknown_addresses_share_one_budget() {
        let l = AuthLimiter::default();
        let t0 = Instant::now();
        for _ in 0..10 {
            l.failed(None, None, t0);
        }
        assert!(l.check(None, None, t0).is_err());
        assert_eq!(l.check(ip("192.0.2.1"), None, t0), Ok(()));
    }

    #[test]
    fn tables_stay_bounded_and_keep_the_most_spent_entries() {
        let l = AuthLimiter::new(Limits {
            max_entries: 64,
            ..Limits::default()
        });
        let t0 = Instant::now();
        let target = ip("192.0.2.1");
        // Concurrent requests can all fail past the burst: 20 failures, 2 minutes due.
        for _ in 0..20 {
            l.failed(target, Some("acme"), t0);
        }
        // A flood of one failure each from 10,000 addresses against 10,000 names.
        let flood = |from: u32, at: Instant| {
            for i in from..from + 10_000 {
                let addr = Some(IpAddr::V4((0x0a00_0000 + i).into()));
                l.failed(addr, Some(&format!("name-{i}")), at);
                let (addresses, publishers, _) = l.entries();
                assert!(
                    addresses <= 64 && publishers <= 64,
                    "{i}: {addresses}, {publishers}"
                );
            }
        };
        flood(0, t0);
        // The address and the name under attack kept their spent budgets.
        assert!(l.check(target, None, t0).is_err());
        assert!(
            l.check(ip("192.0.2.2"), Some("acme"), t0).is_ok(),
            "30 not reached"
        );
        // Ten seconds on, the flood's entries are idle and go first; the target stays.
        let t1 = t0 + 10 * S;
        flood(10_000, t1);
        assert!(l.check(target, None, t1).is_err());
        // Names that cannot be publishers take no entry at all.
        let before = l.entries().1;
        l.failed(None, Some(&"x".repeat(10_000)), t1);
        l.failed(None, Some("Not_A_Name"), t1);
        assert_eq!(l.entries().1, before);
        // Successes are bounded too.
        for i in 0..1000u32 {
            l.succeeded(
                Some(IpAddr::V4(i.into())),
                "acme",
                t0 + Duration::from_millis(i.into()),
            );
        }
        assert!(l.entries().2 <= 64);
    }
}
