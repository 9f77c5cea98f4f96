//! Where a database lives, as an operator names it: `sqlite:PATH` or a PostgreSQL URL
//! (`postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=verify-full`). Whatever the URL
//! leaves out comes from the standard `PG*` environment variables (`PGHOST`, `PGUSER`,
//! `PGPASSWORD`, `PGSSLMODE`, …) and `~/.pgpass`, as with `psql`. The password is never
//! shown: [`Database`]'s `Display` and `Debug` leave it out, so logs and errors cannot
//! carry it.

use std::fmt;
use std::path::PathBuf;

use sqlx::postgres::{PgConnectOptions, PgSslMode};

/// The query parameters a PostgreSQL URL may carry. Anything else is refused rather
/// than ignored: a misspelt `sslmode` must not silently connect in the clear, and sqlx
/// would log an unknown parameter's value, which may be a secret.
const POSTGRES_PARAMETERS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// A database to open.
#[derive(Clone)]
pub enum Database {
    /// A SQLite file, created if missing.
    Sqlite(PathBuf),
    /// A PostgreSQL database (which must exist; its tables are created on first start).
    Postgres(Box<PgConnectOptions>),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DatabaseUrlError {
    #[error("the database URL is empty")]
    Empty,
    #[error(
        "unsupported database URL scheme `{0}`: use sqlite:PATH or postgres://USER@HOST/DATABASE"
    )]
    Scheme(String),
    #[error("sqlite: needs a file path (sqlite:/var/lib/marketplace/marketplace.db)")]
    SqlitePath,
    #[error("the PostgreSQL URL does not parse: {0}")]
    Syntax(String),
    #[error(
        "the PostgreSQL URL has an unknown parameter `{0}` (known: sslmode, sslrootcert, sslcert, sslkey, host, hostaddr, port, dbname, user, password, application_name, options)"
    )]
    Parameter(String),
    #[error("the PostgreSQL URL's {0}")]
    Value(String),
}

impl Database {
    /// Parses a URL (see the module's documentation). Errors never quote the URL, which
    /// may hold a password.
    pub fn parse(url: &str) -> Result<Database, DatabaseUrlError> {
        let url = url.trim();
        if url.is_empty() {
            return Err(DatabaseUrlError::Empty);
        }
        let Some((scheme, rest)) = url.split_once(':') else {
            return Err(DatabaseUrlError::Scheme(String::new()));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "sqlite" => {
                // sqlite:PATH and sqlx's sqlite://PATH (so sqlite:///abs is /abs).
                let path = rest.strip_prefix("//").unwrap_or(rest);
                if path.is_empty() || path.contains('?') || path == ":memory:" {
                    return Err(DatabaseUrlError::SqlitePath);
                }
                Ok(Database::Sqlite(PathBuf::from(path)))
            }
            "postgres" | "postgresql" => postgres(url),
            other => Err(DatabaseUrlError::Scheme(
                other.chars().take(20).collect::<String>(),
            )),
        }
    }

    /// A short name for logs: `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            Database::Sqlite(_) => "sqlite",
            Database::Postgres(_) => "postgres",
        }
    }
}

fn postgres(url: &str) -> Result<Database, DatabaseUrlError> {
    // url's errors name the problem, never the input.
    let parsed = url::Url::parse(url).map_err(|e| DatabaseUrlError::Syntax(e.to_string()))?;
    for (key, _) in parsed.query_pairs() {
        if !POSTGRES_PARAMETERS.contains(&key.as_ref()) {
            return Err(DatabaseUrlError::Parameter(key.chars().take(40).collect()));
        }
    }
    for (key, value) in parsed.query_pairs() {
        let bad = match key.as_ref() {
            "sslmode" => value.parse::<PgSslMode>().is_err(),
            "port" => value.parse::<u16>().is_err(),
            "hostaddr" => value.parse::<std::net::IpAddr>().is_err(),
            _ => false,
        };
        if bad {
            // These values are not secrets; still, cut them short.
            let value: String = value.chars().take(40).collect();
            return Err(DatabaseUrlError::Value(format!(
                "{key} `{value}` is not valid{}",
                if key == "sslmode" {
                    " (disable, allow, prefer, require, verify-ca, verify-full)"
                } else {
                    ""
                }
            )));
        }
    }
    let options = PgConnectOptions::from_url(&parsed)
        .map_err(|e| DatabaseUrlError::Value(format!("values do not parse: {e}")))?;
    let options = if options.get_application_name().is_none() {
        options.application_name("marketplace")
    } else {
        options
    };
    Ok(Database::Postgres(Box::new(options)))
}

use sqlx::ConnectOptions as _;

impl fmt::Display for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Database::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            Database::Postgres(o) => {
                write!(f, "postgres://{}@", o.get_username())?;
                match o.get_socket() {
                    Some(_) => write!(f, "localhost:{}", o.get_port())?,
                    None => write!(f, "{}:{}", o.get_host(), o.get_port())?,
                }
                write!(f, "/{}", o.get_database().unwrap_or(o.get_username()))?;
                if let Some(dir) = o.get_socket() {
                    write!(f, "?host={}", dir.display())?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Database({self})")
    }
}

impl std::str::FromStr for Database {
    type Err = DatabaseUrlError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Database::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_name_a_file() {
        for (url, path) in [
            ("sqlite:data/m.db", "data/m.db"),
            ("sqlite://data/m.db", "data/m.db"),
            ("sqlite:///var/lib/m.db", "/var/lib/m.db"),
        ] {
            let Database::Sqlite(p) = Database::parse(url).unwrap() else {
                panic!("{url}")
            };
            assert_eq!(p, PathBuf::from(path), "{url}");
        }
        for url in [
            "sqlite:",
            "sqlite://",
            "sqlite::memory:",
            "sqlite:x.db?mode=ro",
        ] {
            assert_eq!(
                Database::parse(url).unwrap_err(),
                DatabaseUrlError::SqlitePath,
                "{url}"
            );
        }
    }

    #[test]
    fn postgres_urls_keep_their_password_out_of_sight() {
        let db =
            Database::parse("postgres://market:s3cret@db.example:6432/catalog?sslmode=verify-full")
                .unwrap();
        let shown = format!("{db} {db:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("postgres://market@db.example:6432/catalog"),
            "{shown}"
        );
        let Database::Postgres(o) = db else { panic!() };
        assert!(matches!(o.get_ssl_mode(), PgSslMode::VerifyFull));
        assert_eq!(o.get_application_name(), Some("marketplace"));
    }

    #[test]
    fn bad_urls_are_refused_without_quoting_secrets() {
        let cases = [
            ("mysql://u:pw@h/db", "scheme `mysql`"),
            (
                "postgres://u:pw@h/db?sslmod=require",
                "unknown parameter `sslmod`",
            ),
            (
                "postgres://u:pw@h/db?sslmode=always",
                "sslmode `always` is not valid",
            ),
            (
                "postgres://u:pw@h/db?port=99999",
                "port `99999` is not valid",
            ),
            ("postgres://u:pw@[::1/db", "does not parse"),
            ("", "empty"),
        ];
        for (url, expected) in cases {
            let err = Database::parse(url).unwrap_err().to_string();
            assert!(err.contains(expected), "{url}: {err}");
            assert!(!err.contains("pw"), "{url}: {err}");
        }
    }
}
