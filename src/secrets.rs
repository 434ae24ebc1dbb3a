//! Secrets not kept (issue 31, part 5; DESIGN §6, "Secrets"): a job's `runtime_env`
//! (which carries users' API tokens in `env_vars`) is stored sealed with AES-256-GCM
//! (`ring::aead`, already in the build through rustls) under the newest of
//! `secrets.runtime_env_keys`, opened by the dispatcher when it sends the job to Ray,
//! and deleted when the job ends (`store::apply`).
//!
//! A sealed value is the JSON string `"fs1:<key id>:<base64 of nonce ‖ ciphertext ‖
//! tag>"`: the key id is the first 8 hex digits of SHA-256 of the key (it names the key
//! without revealing it, so a value sealed under an older key is opened with that key
//! and one sealed under a key no longer configured is said so), the nonce 12 random
//! bytes, the tag 16 bytes. The associated data is the job's user id, so a sealed
//! runtime_env copied into another user's row does not open (that user's job would
//! run with the first user's tokens). The plaintext is serde_json's text of the value.
//!
//! No key configured (allowed only without `auth.tokens`, the loopback service of
//! development; `config::validate`): the runtime_env is stored as the JSON object it
//! is, as before this module, and still deleted when the job ends.
//!
//! What is kept after the job ends is a digest for idempotent resubmits
//! ([`Sealer::digest`]): with a key, `k<key id>:<hex HMAC-SHA-256, 216 bits>` under a digest
//! key derived from that key, so that whoever reads the database cannot test a guessed
//! runtime_env (a token of low entropy) against it, as an unkeyed SHA-256 would let
//! them (a fresh tester's finding); without a key, the unkeyed hex SHA-256 of
//! migration 11.

use std::fmt;

use base64::Engine as _;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::Deserialize;
use sha2::Digest as _;

/// The prefix of a sealed value (version 1 of the format).
const PREFIX: &str = "fs1:";

/// One AES-256 key of `secrets.runtime_env_keys`: 32 bytes, written in the
/// configuration as standard base64 (44 characters, e.g. `openssl rand -base64 32`).
/// Its `Debug` shows only its id.
#[derive(Clone)]
pub struct RuntimeEnvKey {
    bytes: [u8; 32],
    id: String,
}

impl RuntimeEnvKey {
    /// Parses a key written as standard base64 of exactly 32 bytes (surrounding
    /// whitespace ignored). Errors: why not, without the key's text.
    pub fn parse(text: &str) -> Result<RuntimeEnvKey, String> {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| {
                "is not base64 (write 32 random bytes in standard base64: `openssl rand -base64 32`)"
                    .to_string()
            })?;
        let bytes: [u8; 32] = raw.as_slice().try_into().map_err(|_| {
            format!(
                "must be 32 bytes (AES-256) in base64, 44 characters; this one is {} bytes",
                raw.len()
            )
        })?;
        Ok(RuntimeEnvKey::from_bytes(bytes))
    }

    /// A key of these 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> RuntimeEnvKey {
        let id = sha2::Sha256::digest(bytes)[..4]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        RuntimeEnvKey { bytes, id }
    }

    /// The key's id: the first 8 hex digits of its SHA-256 (written in sealed values
    /// and in messages; it does not reveal the key).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the key is 32 equal bytes (`AAAA…A=`, all zero): a placeholder, not a
    /// random key. Warned of at start (a fresh tester's finding); not refused, since
    /// such keys serve the test configurations.
    pub fn is_trivial(&self) -> bool {
        self.bytes.iter().all(|b| *b == self.bytes[0])
    }
}

impl fmt::Debug for RuntimeEnvKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RuntimeEnvKey({})", self.id)
    }
}

/// `secrets.runtime_env_keys`: the keys, newest first. In TOML a list of strings; in
/// the environment (`FAIRSHARE__SECRETS__RUNTIME_ENV_KEYS`) one string with the keys
/// separated by commas (base64 has none). Errors name the key's place, from 0
/// (`[1]: must be 32 bytes …`), never its text.
#[derive(Clone, Debug, Default)]
pub struct KeyList(pub Vec<RuntimeEnvKey>);

impl<'de> Deserialize<'de> for KeyList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<KeyList, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            List(Vec<String>),
            One(String),
        }
        let texts: Vec<String> = match Raw::deserialize(d)
            .map_err(|_| serde::de::Error::custom("must be a list of base64 keys"))?
        {
            Raw::List(l) => l,
            Raw::One(s) if s.trim().is_empty() => Vec::new(),
            Raw::One(s) => s.split(',').map(str::to_string).collect(),
        };
        let mut keys = Vec::with_capacity(texts.len());
        for (i, t) in texts.iter().enumerate() {
            let key = RuntimeEnvKey::parse(t)
                .map_err(|e| serde::de::Error::custom(format!("[{i}]: {e}")))?;
            if keys.iter().any(|k: &RuntimeEnvKey| k.bytes == key.bytes) {
                return Err(serde::de::Error::custom(format!(
                    "[{i}]: the same key is listed twice"
                )));
            }
            keys.push(key);
        }
        Ok(KeyList(keys))
    }
}

/// Why a stored runtime_env could not be opened.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenError {
    /// Sealed under a key `secrets.runtime_env_keys` does not hold (any more).
    #[error(
        "its runtime_env is sealed with key {0}, which secrets.runtime_env_keys does not hold"
    )]
    UnknownKey(String),
    /// Sealed, but the value was changed, belongs to another user, or is not of this
    /// format.
    #[error("its stored runtime_env does not open (altered, or not this job's)")]
    Corrupt,
}

/// Why a runtime_env could not be sealed (the system's random source failed).
#[derive(Debug, thiserror::Error)]
#[error("cannot seal the runtime_env: the system's random number source failed")]
pub struct SealError;

/// Seals and opens stored runtime_envs with the configured keys (see the module
/// docs). Cheap to clone? No: hold it in an `Arc`.
pub struct Sealer {
    /// `(id, key)`, newest first; empty: runtime_envs are stored as they are.
    keys: Vec<(String, LessSafeKey)>,
    /// `(id, digest key)` of each key, in the same order: HMAC-SHA-256 of the label
    /// [`DIGEST_LABEL`] under the key's bytes, so the digests' key is not the
    /// sealing key itself.
    digest_keys: Vec<(String, [u8; 32])>,
    rng: SystemRandom,
}

/// What a key's digest key is derived with (see [`Sealer`]).
const DIGEST_LABEL: &[u8] = b"fairshare runtime_env digest v1";

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("Sealer").field("keys", &ids).finish()
    }
}

impl Sealer {
    /// A sealer of `keys`, newest first (the first seals, any opens).
    pub fn new(keys: &KeyList) -> Sealer {
        Sealer {
            keys: keys
                .0
                .iter()
                .filter_map(|k| {
                    let key = UnboundKey::new(&AES_256_GCM, &k.bytes).ok()?;
                    Some((k.id.clone(), LessSafeKey::new(key)))
                })
                .collect(),
            digest_keys: keys
                .0
                .iter()
                .map(|k| {
                    (
                        k.id.clone(),
                        crate::mac::hmac_sha256(&k.bytes, &[DIGEST_LABEL]),
                    )
                })
                .collect(),
            rng: SystemRandom::new(),
        }
    }

    /// The digest to store of a submission's runtime_env `env` (as submitted,
    /// before sealing), for idempotent resubmits: `k<key id>:<54 hex digits>` (64
    /// characters), the HMAC-SHA-256 of its text under the newest key's digest key,
    /// cut to 216 bits; without a key the unkeyed hex SHA-256
    /// ([`migration::runtime_env_digest`]).
    pub fn digest(&self, env: Option<&serde_json::Value>) -> String {
        self.digests(env).swap_remove(0)
    }

    /// Every digest a stored job with the same runtime_env as `env` may carry, the
    /// one to store ([`Sealer::digest`]) first: under each configured key, newest
    /// first (a job stored before the newest key was added), then the unkeyed one
    /// (stored without a key, or before migration 11). A digest made under a key no
    /// longer configured matches none of them.
    pub fn digests(&self, env: Option<&serde_json::Value>) -> Vec<String> {
        let text = migration::runtime_env_digest_text(env);
        self.digest_keys
            .iter()
            .map(|(id, key)| keyed_digest(id, key, &text))
            .chain(std::iter::once(migration::unkeyed_digest_of_text(&text)))
            .collect()
    }

    /// Whether a key is configured (else values are stored as they are).
    pub fn seals(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The id of the key that seals ([`RuntimeEnvKey::id`]), if any.
    pub fn newest(&self) -> Option<&str> {
        self.keys.first().map(|(id, _)| id.as_str())
    }

    /// What to store for `env`, a runtime_env of `user`: the sealed JSON string, or
    /// `env` itself when no key is configured.
    pub fn seal(
        &self,
        user: &str,
        env: &serde_json::Value,
    ) -> Result<serde_json::Value, SealError> {
        let Some((id, key)) = self.keys.first() else {
            return Ok(env.clone());
        };
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|_| SealError)?;
        let mut data = serde_json::to_vec(env).map_err(|_| SealError)?;
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(user.as_bytes()),
            &mut data,
        )
        .map_err(|_| SealError)?;
        let mut blob = Vec::with_capacity(NONCE_LEN + data.len());
        blob.extend_from_slice(&nonce);
        blob.extend_from_slice(&data);
        Ok(serde_json::Value::String(format!(
            "{PREFIX}{id}:{}",
            base64::engine::general_purpose::STANDARD.encode(blob)
        )))
    }

    /// The runtime_env stored as `stored` for `user`: opened when sealed (with the key
    /// its id names), as it is when it is a JSON object (stored without a key, or
    /// before migration 11). Errors: [`OpenError`].
    pub fn open(
        &self,
        user: &str,
        stored: &serde_json::Value,
    ) -> Result<serde_json::Value, OpenError> {
        let text = match stored {
            serde_json::Value::String(s) => s,
            serde_json::Value::Object(_) => return Ok(stored.clone()),
            _ => return Err(OpenError::Corrupt),
        };
        let (id, b64) = text
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split_once(':'))
            .ok_or(OpenError::Corrupt)?;
        let (_, key) = self
            .keys
            .iter()
            .find(|(k, _)| k == id)
            .ok_or_else(|| OpenError::UnknownKey(id.to_string()))?;
        let mut blob = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| OpenError::Corrupt)?;
        if blob.len() < NONCE_LEN {
            return Err(OpenError::Corrupt);
        }
        let mut data = blob.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&blob).map_err(|_| OpenError::Corrupt)?;
        let plain = key
            .open_in_place(nonce, Aad::from(user.as_bytes()), &mut data)
            .map_err(|_| OpenError::Corrupt)?;
        serde_json::from_slice(plain).map_err(|_| OpenError::Corrupt)
    }

    /// The id of the key `stored` is sealed with when this sealer does not hold it
    /// (what [`Sealer::open`] would refuse with [`OpenError::UnknownKey`]); `None` for a
    /// value it can open or that is not sealed. Reads only the value's prefix.
    pub fn missing_key(&self, stored: &serde_json::Value) -> Option<String> {
        let serde_json::Value::String(s) = stored else {
            return None;
        };
        let (id, _) = s.strip_prefix(PREFIX)?.split_once(':')?;
        (!self.keys.iter().any(|(k, _)| k == id)).then(|| id.to_string())
    }

    /// Whether `stored` is what [`Sealer::seal`] writes now: sealed under the newest
    /// key, or, with no key, the plaintext object.
    pub fn is_current(&self, stored: &serde_json::Value) -> bool {
        match (self.newest(), stored) {
            (None, serde_json::Value::Object(_)) => true,
            (Some(id), serde_json::Value::String(s)) => s
                .strip_prefix(PREFIX)
                .and_then(|r| r.split_once(':'))
                .is_some_and(|(k, _)| k == id),
            _ => false,
        }
    }
}

/// `k<id>:<the first 54 hex digits (216 bits) of HMAC-SHA-256 of text under key>`:
/// 64 characters, as the column holds (migration 11) and the unkeyed digest is.
fn keyed_digest(id: &str, key: &[u8; 32], text: &[u8]) -> String {
    let mac = crate::mac::hex(&crate::mac::hmac_sha256(key, &[text]));
    format!("k{id}:{}", &mac[..54])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(b: u8) -> RuntimeEnvKey {
        RuntimeEnvKey::from_bytes([b; 32])
    }

    fn sealer(keys: &[RuntimeEnvKey]) -> Sealer {
        Sealer::new(&KeyList(keys.to_vec()))
    }

    fn env() -> serde_json::Value {
        json!({"env_vars": {"QISKIT_IBM_TOKEN": "tok-ada-0123456789"}, "working_dir": "gcs://x.zip"})
    }

    #[test]
    fn a_sealed_runtime_env_opens_to_itself_and_shows_no_plaintext() {
        let s = sealer(&[key(1)]);
        let sealed = s.seal("ada", &env()).unwrap();
        let text = sealed.as_str().unwrap();
        assert!(text.starts_with(&format!("fs1:{}:", key(1).id())), "{text}");
        assert!(!text.contains("tok-ada"), "{text}");
        assert_eq!(s.open("ada", &sealed).unwrap(), env());
        // A fresh nonce each time: the same value seals differently.
        assert_ne!(s.seal("ada", &env()).unwrap(), sealed);
        assert!(s.is_current(&sealed));
    }

    #[test]
    fn keys_rotate_the_newest_seals_and_any_opens() {
        let old = sealer(&[key(1)]);
        let sealed_old = old.seal("ada", &env()).unwrap();
        let rotated = sealer(&[key(2), key(1)]);
        assert_eq!(rotated.open("ada", &sealed_old).unwrap(), env());
        assert!(!rotated.is_current(&sealed_old));
        let sealed_new = rotated.seal("ada", &env()).unwrap();
        assert!(sealed_new
            .as_str()
            .unwrap()
            .starts_with(&format!("fs1:{}:", key(2).id())));
        assert!(rotated.is_current(&sealed_new));
        // The old key removed: what it sealed no longer opens, and says which key.
        let only_new = sealer(&[key(2)]);
        assert_eq!(
            only_new.open("ada", &sealed_old),
            Err(OpenError::UnknownKey(key(1).id().to_string()))
        );
        assert_eq!(only_new.open("ada", &sealed_new).unwrap(), env());
    }

    /// A value sealed under a key the sealer lacks names that key (what the
    /// dispatcher holds a job back for, issue 43 §3); one it holds, plaintext and
    /// other values name none.
    #[test]
    fn a_missing_key_is_named_and_a_held_one_is_not() {
        let k2 = sealer(&[key(2)]).seal("ada", &env()).unwrap();
        let k1 = sealer(&[key(1)]).seal("ada", &env()).unwrap();
        let only_k1 = sealer(&[key(1)]);
        assert_eq!(only_k1.missing_key(&k2), Some(key(2).id().to_string()));
        assert_eq!(only_k1.missing_key(&k1), None);
        assert_eq!(sealer(&[key(2), key(1)]).missing_key(&k2), None);
        assert_eq!(only_k1.missing_key(&env()), None);
        assert_eq!(only_k1.missing_key(&json!("plain")), None);
        assert_eq!(
            only_k1.open("ada", &k2),
            Err(OpenError::UnknownKey(key(2).id().to_string()))
        );
    }

    #[test]
    fn a_wrong_key_under_the_same_id_another_user_or_a_tampered_value_does_not_open() {
        let s = sealer(&[key(1)]);
        let sealed = s.seal("ada", &env()).unwrap();
        // Another user's row: the associated data differs.
        assert_eq!(s.open("bob", &sealed), Err(OpenError::Corrupt));
        // One bit of the ciphertext flipped.
        let text = sealed.as_str().unwrap();
        let (head, b64) = text.rsplit_once(':').unwrap();
        let mut blob = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        blob[NONCE_LEN + 3] ^= 1;
        let tampered = json!(format!(
            "{head}:{}",
            base64::engine::general_purpose::STANDARD.encode(&blob)
        ));
        assert_eq!(s.open("ada", &tampered), Err(OpenError::Corrupt));
        // Cut short, not base64, not the format, not a string or object.
        for bad in [
            json!(format!("{head}:AAAA")),
            json!(format!("{head}:!!!")),
            json!("fs1:nokey"),
            json!("plain text"),
            json!(7),
        ] {
            assert!(s.open("ada", &bad).is_err(), "{bad}");
        }
        // A different key that claims the first key's id.
        let other = Sealer {
            keys: vec![(
                key(1).id().to_string(),
                LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[9u8; 32]).unwrap()),
            )],
            digest_keys: Vec::new(),
            rng: SystemRandom::new(),
        };
        assert_eq!(other.open("ada", &sealed), Err(OpenError::Corrupt));
    }

    #[test]
    fn without_a_key_the_object_is_stored_as_it_is() {
        let s = sealer(&[]);
        assert!(!s.seals());
        assert_eq!(s.seal("ada", &env()).unwrap(), env());
        assert_eq!(s.open("ada", &env()).unwrap(), env());
        assert!(s.is_current(&env()));
        // A legacy plaintext row opens under keys too.
        assert_eq!(sealer(&[key(1)]).open("ada", &env()).unwrap(), env());
    }

    #[test]
    fn keys_parse_from_base64_of_32_bytes_only_and_never_show_their_text() {
        let text = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        let k = RuntimeEnvKey::parse(&format!(" {text}\n")).unwrap();
        assert_eq!(k.id().len(), 8);
        assert!(!format!("{k:?}").contains(&text));
        let short = base64::engine::general_purpose::STANDARD.encode([7u8; 16]);
        assert!(RuntimeEnvKey::parse(&short)
            .unwrap_err()
            .contains("16 bytes"));
        assert!(RuntimeEnvKey::parse("not base64!")
            .unwrap_err()
            .contains("base64"));
        // A list, or one comma-separated string (the environment's form).
        let two = format!(
            "{text},{}",
            base64::engine::general_purpose::STANDARD.encode([8u8; 32])
        );
        let list: KeyList = serde_json::from_value(json!(two)).unwrap();
        assert_eq!(list.0.len(), 2);
        let none: KeyList = serde_json::from_value(json!("")).unwrap();
        assert!(none.0.is_empty());
        let err = serde_json::from_value::<KeyList>(json!([text, short])).unwrap_err();
        assert!(
            err.to_string().starts_with("[1]: must be 32 bytes"),
            "{err}"
        );
        let dup = serde_json::from_value::<KeyList>(json!([text, text])).unwrap_err();
        assert!(dup.to_string().contains("twice"), "{dup}");
    }

    /// The digest kept after a job ends is keyed: not the unkeyed SHA-256 that a
    /// reader of the database could test a guess against; one per configured key
    /// and the unkeyed one are what a stored job may carry.
    #[test]
    fn a_digest_is_keyed_and_every_configured_key_matches() {
        let (a, b) = (key(1), key(2));
        let only_a = sealer(std::slice::from_ref(&a));
        let d = only_a.digest(Some(&env()));
        assert!(
            d.starts_with(&format!("k{}:", a.id())) && d.len() == 64,
            "{d}"
        );
        assert_ne!(d, migration::runtime_env_digest(Some(&env())));
        assert_ne!(d, only_a.digest(Some(&json!({"env_vars": {}}))));
        assert_eq!(
            only_a.digest(None),
            only_a.digest(Some(&serde_json::Value::Null))
        );
        let rotated = sealer(&[b.clone(), a.clone()]);
        let all = rotated.digests(Some(&env()));
        assert_eq!(all.len(), 3);
        assert!(
            all.contains(&d),
            "a job stored under the older key still matches"
        );
        assert!(all.contains(&rotated.digest(Some(&env()))));
        assert!(all.contains(&migration::runtime_env_digest(Some(&env()))));
        assert!(!sealer(&[b]).digests(Some(&env())).contains(&d));
        let none = sealer(&[]);
        assert_eq!(
            none.digest(Some(&env())),
            migration::runtime_env_digest(Some(&env()))
        );
    }

    /// An all-zero key (a placeholder) is said at start (a fresh tester's finding).
    #[test]
    fn a_key_of_equal_bytes_is_trivial() {
        let zero = RuntimeEnvKey::parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=").unwrap();
        assert!(zero.is_trivial() && key(42).is_trivial());
        let mut bytes = [9u8; 32];
        bytes[31] = 10;
        assert!(!RuntimeEnvKey::from_bytes(bytes).is_trivial());
    }
}
