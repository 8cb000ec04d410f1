//! A machine's identity: an ed25519 key and an X25519 key.
//!
//! The ed25519 key is the machine's libp2p identity: its PeerId is exactly
//! the one libp2p derives for the same key (the identity multihash of the
//! protobuf-encoded public key, `12D3KooW…` in base58), and it signs
//! envelopes, team blocks and contact records. The X25519 key is separate
//! and only receives HPKE-sealed envelopes, so the signing key is never used
//! for key agreement.

use std::fmt;

use ciborium::Value;
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use hpke::{Deserializable, Kem as _, Serializable};
use libp2p_identity::PeerId;
use rand_core::CryptoRng;
use zeroize::Zeroizing;

use crate::cbor::{self, DecodeError, Fields, Wire};

/// The KEM of the suite agentmesh uses: DHKEM(X25519, HKDF-SHA256).
pub(crate) type Kem = hpke::kem::X25519HkdfSha256;

/// The first six bytes of every ed25519 PeerId: the identity multihash code
/// (0x00), the digest length (36), then the protobuf `PublicKey` message
/// header: field 1 `Type` = 1 (Ed25519), field 2 `Data` of 32 bytes.
const ED25519_PEER_ID_PREFIX: [u8; 6] = [0x00, 0x24, 0x08, 0x01, 0x12, 0x20];

/// The length of an ed25519 PeerId in bytes: the prefix and the key.
pub const PEER_ID_LEN: usize = 38;

/// The magic string that opens a key file.
const KEY_FILE_MAGIC: &str = "agentmesh-key";

/// A machine's X25519 public key, the one envelopes to it are sealed to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct X25519Public(pub [u8; 32]);

impl fmt::Debug for X25519Public {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "X25519Public({})",
            data_encoding::HEXLOWER.encode(&self.0)
        )
    }
}

impl X25519Public {
    pub(crate) fn to_hpke(self) -> Result<<Kem as hpke::Kem>::PublicKey, hpke::HpkeError> {
        <Kem as hpke::Kem>::PublicKey::from_bytes(&self.0)
    }
}

/// A machine's secret keys. Only the daemon holds one.
#[derive(Clone)]
pub struct Identity {
    signing: SigningKey,
    x25519: <Kem as hpke::Kem>::PrivateKey,
    x25519_public: X25519Public,
    peer_id: PeerId,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print secrets.
        f.debug_struct("Identity")
            .field("peer_id", &self.peer_id)
            .field("x25519_public", &self.x25519_public)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Generates a fresh identity.
    pub fn generate(rng: &mut impl CryptoRng) -> Self {
        let mut ed = Zeroizing::new([0u8; 32]);
        let mut x = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(ed.as_mut());
        rng.fill_bytes(x.as_mut());
        Identity::from_secrets(&ed, &x)
    }

    /// Builds an identity from its two 32-byte secrets. The X25519 secret is
    /// clamped as RFC 7748 says, so any 32 bytes are a valid secret.
    pub fn from_secrets(ed25519_secret: &[u8; 32], x25519_secret: &[u8; 32]) -> Self {
        let signing = SigningKey::from_bytes(ed25519_secret);
        let x25519 = <Kem as hpke::Kem>::PrivateKey::from_bytes(x25519_secret)
            .expect("any 32 bytes are an X25519 secret once clamped");
        let x25519_public = X25519Public(Kem::sk_to_pk(&x25519).to_bytes().into());
        let peer_id = peer_id_from_ed25519(&signing.verifying_key().to_bytes())
            .expect("a signing key's public key is a valid ed25519 point");
        Identity {
            signing,
            x25519,
            x25519_public,
            peer_id,
        }
    }

    /// The machine's PeerId, as libp2p derives it from the ed25519 key.
    pub fn peer_id(&self) -> PeerId {
        self.peer_id
    }

    /// The ed25519 public key.
    pub fn ed25519_public(&self) -> [u8; 32] {
        self.signing.verifying_key().to_bytes()
    }

    /// The ed25519 secret, to build the libp2p keypair from the same key.
    pub fn ed25519_secret(&self) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(self.signing.to_bytes())
    }

    /// The X25519 public key envelopes to this machine are sealed to.
    pub fn x25519_public(&self) -> X25519Public {
        self.x25519_public
    }

    pub(crate) fn x25519_secret(&self) -> &<Kem as hpke::Kem>::PrivateKey {
        &self.x25519
    }

    /// Signs `message` with the ed25519 key.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.signing.sign(message).to_bytes()
    }

    /// The key file: canonical CBOR
    /// `["agentmesh-key", version, ed25519_secret, x25519_secret]`.
    /// Whoever stores it must keep it private (mode 0600).
    pub fn to_key_file(&self) -> Zeroizing<Vec<u8>> {
        let x: Zeroizing<[u8; 32]> = Zeroizing::new(self.x25519.to_bytes().into());
        Zeroizing::new(cbor::encode(&Value::Array(vec![
            Value::Text(KEY_FILE_MAGIC.into()),
            cbor::uint(crate::PROTOCOL_VERSION),
            Value::Bytes(self.signing.to_bytes().to_vec()),
            Value::Bytes(x.to_vec()),
        ])))
    }

    /// Reads a key file written by [`Identity::to_key_file`].
    pub fn from_key_file(bytes: &[u8]) -> Result<Self, DecodeError> {
        const WHAT: &str = "key file";
        let value = cbor::decode(WHAT, bytes, 256)?;
        let mut f = Fields::new(WHAT, value, 4)?;
        if f.text("magic", 32)? != KEY_FILE_MAGIC {
            return Err(f.error(
                "magic",
                "is not \"agentmesh-key\": this is not an agentmesh key file",
            ));
        }
        let version = f.uint("version", u64::MAX)?;
        if version != crate::PROTOCOL_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                what: WHAT,
                found: version,
                supported: crate::PROTOCOL_VERSION,
            });
        }
        let ed = Zeroizing::new(f.array::<32>("ed25519_secret")?);
        let x = Zeroizing::new(f.array::<32>("x25519_secret")?);
        Ok(Identity::from_secrets(&ed, &x))
    }
}

/// The PeerId of an ed25519 public key, or `None` if the bytes are not a
/// valid ed25519 point.
pub fn peer_id_from_ed25519(public: &[u8; 32]) -> Option<PeerId> {
    let key = libp2p_identity::ed25519::PublicKey::try_from_bytes(public).ok()?;
    Some(libp2p_identity::PublicKey::from(key).to_peer_id())
}

/// The ed25519 public key inside an ed25519 PeerId, or `None` if the PeerId
/// is of another key type (agentmesh machines are ed25519 only).
pub fn ed25519_of(peer: &PeerId) -> Option<[u8; 32]> {
    let mh = peer.as_ref();
    let digest = mh.digest();
    if mh.code() != 0 || digest.len() != 36 || digest[..4] != ED25519_PEER_ID_PREFIX[2..] {
        return None;
    }
    digest[4..].try_into().ok()
}

/// The verifying key of an ed25519 PeerId.
pub(crate) fn verifying_key(peer: &PeerId) -> Option<VerifyingKey> {
    VerifyingKey::from_bytes(&ed25519_of(peer)?).ok()
}

/// Checks an ed25519 signature from `peer` over `message` (strict RFC 8032
/// verification: canonical S, no small-order keys or R).
pub(crate) fn verify(peer: &PeerId, message: &[u8], signature: &[u8; 64]) -> bool {
    let Some(key) = verifying_key(peer) else {
        return false;
    };
    key.verify_strict(message, &ed25519_dalek::Signature::from_bytes(signature))
        .is_ok()
}

/// A PeerId as a CBOR byte string.
pub(crate) fn peer_value(peer: &PeerId) -> Value {
    Value::Bytes(peer.to_bytes())
}

/// Reads an ed25519 PeerId field.
pub(crate) fn peer_field(f: &mut Fields, field: &'static str) -> Result<PeerId, DecodeError> {
    let bytes = f.array::<PEER_ID_LEN>(field)?;
    peer_from_bytes(&bytes).ok_or_else(|| f.error(field, "is not an ed25519 PeerId"))
}

/// Parses the 38 bytes of an ed25519 PeerId. The key inside is not checked
/// to be a curve point here (decompressing it costs more than the rest of
/// decoding a header); a PeerId whose key is not a point can never verify a
/// signature, which is where it is refused.
pub(crate) fn peer_from_bytes(bytes: &[u8]) -> Option<PeerId> {
    if bytes.len() != PEER_ID_LEN || bytes[..6] != ED25519_PEER_ID_PREFIX {
        return None;
    }
    PeerId::from_bytes(bytes).ok()
}

impl Wire for X25519Public {
    const WHAT: &'static str = "X25519 public key";
    const MAX_BYTES: usize = 34;

    fn to_value(&self) -> Value {
        Value::Bytes(self.0.to_vec())
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        match value {
            Value::Bytes(b) => b
                .try_into()
                .map(X25519Public)
                .map_err(|_| DecodeError::Field {
                    what: Self::WHAT,
                    field: "key",
                    problem: "must be 32 bytes".into(),
                }),
            _ => Err(DecodeError::Field {
                what: Self::WHAT,
                field: "key",
                problem: "must be a byte string".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn peer_id_matches_libp2p() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..32 {
            let id = Identity::generate(&mut rng);
            let mut secret = *id.ed25519_secret();
            let libp2p = libp2p_identity::Keypair::ed25519_from_bytes(&mut secret)
                .unwrap()
                .public()
                .to_peer_id();
            assert_eq!(id.peer_id(), libp2p);
            assert_eq!(id.peer_id().to_bytes().len(), PEER_ID_LEN);
            assert!(id.peer_id().to_base58().starts_with("12D3KooW"));
            assert_eq!(ed25519_of(&libp2p), Some(id.ed25519_public()));
            assert_eq!(peer_from_bytes(&libp2p.to_bytes()), Some(libp2p));
        }
    }

    #[test]
    fn non_ed25519_peer_ids_are_refused() {
        // A random PeerId is an identity multihash of 32 random bytes, not of
        // an ed25519 protobuf key.
        let random = PeerId::random();
        assert_eq!(ed25519_of(&random), None);
        assert_eq!(peer_from_bytes(&random.to_bytes()), None);
    }

    #[test]
    fn key_file_round_trips() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        let id = Identity::generate(&mut rng);
        let file = id.to_key_file();
        let back = Identity::from_key_file(&file).unwrap();
        assert_eq!(back.peer_id(), id.peer_id());
        assert_eq!(back.x25519_public(), id.x25519_public());
        assert_eq!(*back.ed25519_secret(), *id.ed25519_secret());
    }

    #[test]
    fn key_file_errors() {
        let bad_magic = cbor::encode(&Value::Array(vec![
            Value::Text("ssh-key".into()),
            cbor::uint(1),
            Value::Bytes(vec![0; 32]),
            Value::Bytes(vec![0; 32]),
        ]));
        let e = Identity::from_key_file(&bad_magic).unwrap_err();
        assert!(e.to_string().contains("not an agentmesh key file"), "{e}");
        let future = cbor::encode(&Value::Array(vec![
            Value::Text(KEY_FILE_MAGIC.into()),
            cbor::uint(9),
            Value::Bytes(vec![0; 32]),
            Value::Bytes(vec![0; 32]),
        ]));
        assert!(matches!(
            Identity::from_key_file(&future),
            Err(DecodeError::UnsupportedVersion { found: 9, .. })
        ));
        assert!(Identity::from_key_file(b"garbage").is_err());
    }

    #[test]
    fn debug_hides_secrets() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let id = Identity::generate(&mut rng);
        let secret_hex = data_encoding::HEXLOWER.encode(id.ed25519_secret().as_ref());
        assert!(!format!("{id:?}").contains(&secret_hex));
    }
}
