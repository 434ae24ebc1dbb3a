//! HMAC-SHA-256, the one keyed hash of the service: the keyed user ids of Ray's Jobs
//! API (`ray_compat.user_rules`), the idempotency digests kept after a job ends
//! (`secrets`), the webhooks' signatures and the attempts' notification URLs
//! (`ray::notify`). RFC 2104 over SHA-256, through the `hmac` crate.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// HMAC-SHA-256 under `key` (any length) of the concatenation of `parts`.
pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC takes a key of any length; new_from_slice cannot fail for it.
    let mut mac = Hmac::<Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// `bytes` as lower-case hex, two digits a byte.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?", in
    /// two parts.
    #[test]
    fn hmac_sha256_is_rfc_4231() {
        let mac = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
