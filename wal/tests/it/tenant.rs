//! Tenant id validation: 1-64 bytes of `[A-Za-z0-9_.-]`, errors that name the bad value.

use ourios_wal::{MAX_TENANT_LEN, TenantId, TenantIdError};

/// Proves every allowed byte and both length bounds are accepted, including ids that look like
/// path components (`.`, `..`), which the WAL turns into file names with a suffix.
/// Reasoned mutation (not run as a mutant): drop `b'.'` from `is_tenant_byte` and `"a.b"` is
/// refused.
#[test]
fn tenant_valid_ids_are_accepted() {
    for ok in [
        "a",
        "Z",
        "0",
        "_",
        "-",
        ".",
        "..",
        "a.b",
        "tenant-1_prod.eu",
        &"x".repeat(MAX_TENANT_LEN),
    ] {
        let t = TenantId::new(ok).unwrap_or_else(|e| panic!("{ok:?} refused: {e}"));
        assert_eq!(t.as_str(), ok);
    }
}

/// Proves empty, 65-byte and out-of-set ids are refused and the message quotes the value.
/// Reasoned mutation (not run as a mutant): change `value.len() > MAX_TENANT_LEN` to `>=` and the
/// 64-byte id in `tenant_valid_ids_are_accepted` fails; remove the `BadByte` check and `"a/b"`
/// passes here.
#[test]
fn tenant_invalid_ids_are_refused_with_the_value_named() {
    assert_eq!(TenantId::new(""), Err(TenantIdError::Empty));
    let long = "y".repeat(MAX_TENANT_LEN + 1);
    let e = TenantId::new(&long).unwrap_err();
    assert!(matches!(e, TenantIdError::TooLong { len: 65, .. }), "{e:?}");
    assert!(e.to_string().contains(&long), "{e}");
    for (bad, byte, index) in [
        ("a/b", b'/', 1),
        ("a b", b' ', 1),
        ("é", 0xc3, 0),
        ("tenant:1", b':', 6),
    ] {
        let e = TenantId::new(bad).unwrap_err();
        assert_eq!(
            e,
            TenantIdError::BadByte {
                value: bad.to_owned(),
                byte,
                index
            }
        );
        let msg = e.to_string();
        assert!(msg.contains(&format!("{bad:?}")), "{msg}");
    }
    let e = TenantId::from_bytes(b"ab\xff").unwrap_err();
    assert!(e.to_string().contains("0xff"), "{e}");
}
