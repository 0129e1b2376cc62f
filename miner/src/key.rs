//! Content-addressed template keys: one key names one template text, forever.

use std::fmt;

use sha2::{Digest, Sha256};

/// Domain separation: a key of this scheme never equals a hash of anything else.
const KEY_DOMAIN: &[u8] = b"ourios.template_key.v1\0";

/// The identity of one template text of one tenant: the first 128 bits of
/// `SHA-256("ourios.template_key.v1\0" || tenant || "\0" || template text)`.
///
/// Unlike `(template_id, version)`, which a miner hands out in the order it sees lines and so
/// depends on its state and configuration, a key depends only on the text: a miner restored
/// from no snapshot, run under another configuration, restarted after a panic mid-frame, or
/// running on another node derives the same key for the same text and a different key for a
/// different one. A reader joins a record to its template on (tenant, key).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TemplateKey(pub [u8; 16]);

impl TemplateKey {
    /// The key of `template` (its rendering, as [`crate::Template::parse`] reads it) for
    /// `tenant`.
    pub fn of(tenant: &str, template: &str) -> TemplateKey {
        let digest = Sha256::new()
            .chain_update(KEY_DOMAIN)
            .chain_update(tenant.as_bytes())
            .chain_update([0u8])
            .chain_update(template.as_bytes())
            .finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        TemplateKey(key)
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for TemplateKey {
    /// Lower-case hex, 32 digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for TemplateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TemplateKey({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_depends_on_tenant_and_text_only() {
        let a = TemplateKey::of("a", "user <NUM> logged in");
        assert_eq!(a, TemplateKey::of("a", "user <NUM> logged in"));
        assert_ne!(a, TemplateKey::of("b", "user <NUM> logged in"));
        assert_ne!(a, TemplateKey::of("a", "user <NUM> logged out"));
        // The separator keeps (tenant, text) pairs apart that concatenate alike.
        assert_ne!(TemplateKey::of("ab", "c"), TemplateKey::of("a", "bc"));
    }

    #[test]
    fn key_is_stable_across_releases() {
        // A stored key must keep naming its text: this value may never change.
        // Computed independently: sha256(b"ourios.template_key.v1\0acme\0user <NUM> logged in")[:16].
        assert_eq!(
            TemplateKey::of("acme", "user <NUM> logged in").to_string(),
            "41dc5a2b5f85735bb71663aa15585576"
        );
    }
}
