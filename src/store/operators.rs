//! Operators of the admin API and their tokens (kept as sha256 hashes), apart from
//! publishers' and reviewers'. The SQL is the same text on both backends (`$N`
//! parameters), so one macro writes both implementations.

/// An operator as `operator token list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorRow {
    pub name: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

/// Writes the operators' queries for a backend's store type.
macro_rules! operator_store {
    ($store:ty) => {
        impl $store {
            /// Adds an operator with a token, or gives a revoked one a new token.
            pub(crate) async fn add_operator(
                &self,
                name: &str,
                token_sha256: &str,
                now: i64,
            ) -> Result<(), StoreError> {
                let done = sqlx::query(
                    "INSERT INTO operators (name, token_sha256, created_at) VALUES ($1, $2, $3)
                     ON CONFLICT (name) DO UPDATE SET token_sha256 = excluded.token_sha256,
                        created_at = excluded.created_at, revoked_at = NULL
                      WHERE operators.revoked_at IS NOT NULL",
                )
                .bind(name)
                .bind(token_sha256)
                .bind(now)
                .execute(&self.pool)
                .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::OperatorExists(name.to_owned()));
                }
                Ok(())
            }

            /// Every operator, by name.
            pub(crate) async fn operators(
                &self,
            ) -> Result<Vec<crate::store::OperatorRow>, StoreError> {
                let rows: Vec<(String, i64, Option<i64>)> = sqlx::query_as(
                    "SELECT name, created_at, revoked_at FROM operators ORDER BY name",
                )
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(name, created_at, revoked_at)| crate::store::OperatorRow {
                        name,
                        created_at,
                        revoked_at,
                    })
                    .collect())
            }

            /// Revokes an operator's token; false when there is no active operator `name`.
            pub(crate) async fn revoke_operator(
                &self,
                name: &str,
                now: i64,
            ) -> Result<bool, StoreError> {
                let done = sqlx::query(
                    "UPDATE operators SET revoked_at = $2 WHERE name = $1 AND revoked_at IS NULL",
                )
                .bind(name)
                .bind(now)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            /// The active operator a token belongs to.
            pub(crate) async fn operator_for_token(
                &self,
                token_sha256: &str,
            ) -> Result<Option<String>, StoreError> {
                Ok(sqlx::query_scalar(
                    "SELECT name FROM operators WHERE token_sha256 = $1 AND revoked_at IS NULL",
                )
                .bind(token_sha256)
                .fetch_optional(&self.pool)
                .await?)
            }
        }
    };
}

pub(crate) use operator_store;
