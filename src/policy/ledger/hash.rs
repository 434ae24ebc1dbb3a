//! The ledger's hashers: users' dense indexes ([`UidHasher`]) and job ids
//! ([`JobHasher`]) hashed with a multiply or two instead of SipHash, and the maps
//! keyed by them.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::policy::JobId;

/// Hashes a [`super::Uid`] with one multiply (they are dense small integers).
#[derive(Default)]
pub(crate) struct UidHasher(u64);

impl Hasher for UidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        // High bits into the low ones a table indexes by.
        self.0 ^ (self.0 >> 29)
    }
}

/// A map or set keyed by small integers or bit patterns, hashed with [`UidHasher`].
pub(crate) type FastHash = BuildHasherDefault<UidHasher>;

/// Hashes a job id with one multiply per 8 bytes and a final mix, rather than
/// SipHash (the arbiter and the ledger hash every queued or outstanding job's id at
/// least twice). The final mix spreads every input bit over the low bits a hash
/// table indexes by: ids whose bytes differ only in a few places (sequential test ids,
/// a v7 id's timestamp) would otherwise collide.
#[derive(Default)]
pub struct JobHasher(u64);

impl Hasher for JobHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }

    fn write_usize(&mut self, _: usize) {
        // Only the length prefix of the id's bytes: the same for every id.
    }

    fn finish(&self) -> u64 {
        // The finalizer of MurmurHash3 (fmix64).
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// A map keyed by job id, hashed with [`JobHasher`].
pub type JobMap<V> = HashMap<JobId, V, BuildHasherDefault<JobHasher>>;
