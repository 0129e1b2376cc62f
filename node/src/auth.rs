//! Bearer tokens, once the node serves data back: `--auth-tokens FILE` maps each token (kept
//! only as its SHA-256) to the tenants it may write and read, and says whether it may read
//! `/metrics`.
//!
//! ```toml
//! [[token]]
//! sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" # ourios-node hash-token
//! tenants = ["acme", "globex"]   # or ["*"] for every tenant
//! metrics = true                 # may read /metrics (default false)
//! ```
//!
//! With tokens on, `POST /v1/logs` and every `/loki/api/v1/...` read need
//! `Authorization: Bearer <token>` whose tenants include the request's `X-Scope-OrgID`: `401`
//! without a known token, `403` for another tenant. `/metrics` needs a token with
//! `metrics = true`. `/healthz` and `/readyz` stay open (they say nothing of any tenant's data).

use std::collections::HashMap;
use std::path::Path;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ourios_wal::TenantId;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// What one token may do.
#[derive(Debug, Clone)]
struct Grant {
    /// None: every tenant.
    tenants: Option<Vec<TenantId>>,
    metrics: bool,
}

/// The token table: SHA-256 (hex) of each token to its grant.
#[derive(Debug, Clone)]
pub struct Tokens {
    by_hash: HashMap<String, Grant>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    sha256: String,
    tenants: Vec<String>,
    #[serde(default)]
    metrics: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    #[serde(default)]
    token: Vec<FileEntry>,
}

/// Why a token file was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthFileError {
    /// The file could not be read.
    #[error("cannot read the token file {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a token table.
    #[error("token file {path}: {why}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
}

/// The SHA-256 of a token, as the token file holds it (lowercase hex).
pub fn hash_token(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Tokens {
    /// Read a token file (see the module docs).
    pub fn load(path: &Path) -> Result<Self, AuthFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| AuthFileError::Read {
            path: shown.clone(),
            source,
        })?;
        let invalid = |why: String| AuthFileError::Invalid {
            path: shown.clone(),
            why,
        };
        let file: TokenFile = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        if file.token.is_empty() {
            return Err(invalid(
                "no [[token]] entries: every request would be refused".into(),
            ));
        }
        let mut by_hash = HashMap::new();
        for entry in file.token {
            let hash = entry.sha256.to_ascii_lowercase();
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(invalid(format!(
                    "sha256 {:?} is not 64 hex digits (make one with `ourios-node hash-token`)",
                    entry.sha256
                )));
            }
            let tenants = if entry.tenants.iter().any(|t| t == "*") {
                None
            } else {
                Some(
                    entry
                        .tenants
                        .iter()
                        .map(|t| TenantId::new(t).map_err(|e| invalid(e.to_string())))
                        .collect::<Result<Vec<_>, _>>()?,
                )
            };
            let grant = Grant {
                tenants,
                metrics: entry.metrics,
            };
            if by_hash.insert(hash.clone(), grant).is_some() {
                return Err(invalid(format!("sha256 {hash} is listed twice")));
            }
        }
        Ok(Self { by_hash })
    }

    fn grant(&self, headers: &HeaderMap) -> Option<&Grant> {
        let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
        let (scheme, token) = value.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        self.by_hash.get(&hash_token(token.trim()))
    }

    /// May this request write or read `tenant`? `401` without a known token, `403` for a token
    /// of other tenants.
    pub(crate) fn allow_tenant(
        &self,
        headers: &HeaderMap,
        tenant: &TenantId,
    ) -> Result<(), Denied> {
        let grant = self.grant(headers).ok_or(Denied::NoToken)?;
        match &grant.tenants {
            None => Ok(()),
            Some(tenants) if tenants.contains(tenant) => Ok(()),
            Some(_) => Err(Denied::Tenant(tenant.clone())),
        }
    }

    /// May this request read `/metrics`?
    pub(crate) fn allow_metrics(&self, headers: &HeaderMap) -> Result<(), Denied> {
        let grant = self.grant(headers).ok_or(Denied::NoToken)?;
        if grant.metrics {
            Ok(())
        } else {
            Err(Denied::Metrics)
        }
    }
}

/// Why the token check refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Denied {
    /// No `Authorization: Bearer` header, or an unknown token (`401`).
    NoToken,
    /// A token of other tenants (`403`).
    Tenant(TenantId),
    /// A token without the `/metrics` grant (`403`).
    Metrics,
}

impl Denied {
    /// What the client reads.
    pub(crate) fn message(&self) -> String {
        match self {
            Self::NoToken => "a bearer token is required (Authorization: Bearer <token>)".into(),
            Self::Tenant(t) => format!("this token may not write or read tenant {t}"),
            Self::Metrics => "this token may not read /metrics".into(),
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::NoToken => StatusCode::UNAUTHORIZED,
            Self::Tenant(_) | Self::Metrics => StatusCode::FORBIDDEN,
        }
    }
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        let status = self.status();
        metrics::counter!(crate::metrics::AUTH_REFUSED, "status" => status.as_u16().to_string())
            .increment(1);
        let mut resp = (status, format!("{}\n", self.message())).into_response();
        if self == Self::NoToken {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(token: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(t) = token {
            h.insert(
                header::AUTHORIZATION,
                format!("Bearer {t}").parse().unwrap(),
            );
        }
        h
    }

    fn tokens(text: &str) -> Result<Tokens, AuthFileError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        std::fs::write(&path, text).unwrap();
        Tokens::load(&path)
    }

    /// Proves a token is checked by its hash, for its tenants only, and for /metrics only
    /// when granted.
    #[test]
    fn tokens_grant_their_tenants_only() {
        let t = tokens(&format!(
            "[[token]]\nsha256 = \"{}\"\ntenants = [\"acme\"]\n\n[[token]]\nsha256 = \"{}\"\ntenants = [\"*\"]\nmetrics = true\n",
            hash_token("s3cret"),
            hash_token("admin")
        ))
        .unwrap();
        let acme = TenantId::new("acme").unwrap();
        let other = TenantId::new("globex").unwrap();
        assert!(t.allow_tenant(&headers(Some("s3cret")), &acme).is_ok());
        let status = |r: Result<(), Denied>| r.unwrap_err().status();
        assert_eq!(
            status(t.allow_tenant(&headers(Some("s3cret")), &other)),
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            status(t.allow_tenant(&headers(None), &acme)),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            status(t.allow_tenant(&headers(Some("S3CRET")), &acme)),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            status(t.allow_metrics(&headers(Some("s3cret")))),
            StatusCode::FORBIDDEN
        );
        assert!(t.allow_metrics(&headers(Some("admin"))).is_ok());
        assert!(t.allow_tenant(&headers(Some("admin")), &other).is_ok());
    }

    /// Proves a file that would lock everyone out or hold a plain token is refused by name.
    #[test]
    fn bad_token_files_are_refused() {
        assert!(tokens("").unwrap_err().to_string().contains("no [[token]]"));
        let plain = tokens("[[token]]\nsha256 = \"s3cret\"\ntenants = [\"a\"]\n").unwrap_err();
        assert!(plain.to_string().contains("64 hex digits"), "{plain}");
        let bad_tenant = format!(
            "[[token]]\nsha256 = \"{}\"\ntenants = [\"a/b\"]\n",
            hash_token("x")
        );
        assert!(tokens(&bad_tenant).is_err());
    }
}
