//! Crockford's base32 (<https://www.crockford.com/base32.html>): digits and
//! letters without I, L, O and U, so nothing read aloud or retyped is
//! ambiguous. Decoding folds case and reads I and L as 1 and O as 0.

use std::sync::LazyLock;

use data_encoding::{Encoding, Specification};

/// The 32 symbols, in value order.
pub(crate) const ALPHABET: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

fn spec(lowercase: bool) -> Encoding {
    let mut spec = Specification::new();
    if lowercase {
        spec.symbols.push_str(&ALPHABET.to_ascii_lowercase());
        spec.translate.from.push_str("ABCDEFGHJKMNPQRSTVWXYZILOilo");
        spec.translate.to.push_str("abcdefghjkmnpqrstvwxyz110110");
    } else {
        spec.symbols.push_str(ALPHABET);
        spec.translate.from.push_str("abcdefghjkmnpqrstvwxyzILOilo");
        spec.translate.to.push_str("ABCDEFGHJKMNPQRSTVWXYZ110110");
    }
    spec.encoding().expect("a valid base32 specification")
}

/// Lowercase Crockford base32, for tickets.
pub(crate) static LOWER: LazyLock<Encoding> = LazyLock::new(|| spec(true));

/// Uppercase Crockford base32, for codes read aloud.
pub(crate) static UPPER: LazyLock<Encoding> = LazyLock::new(|| spec(false));

/// Folds one typed character to its canonical uppercase symbol, or `None`
/// if it is not in the alphabet.
pub(crate) fn fold(c: char) -> Option<char> {
    let c = match c.to_ascii_uppercase() {
        'I' | 'L' => '1',
        'O' => '0',
        c => c,
    };
    ALPHABET.contains(c).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // Crockford: 0x00 0x01 ... in 5-bit groups.
        assert_eq!(UPPER.encode(&[0xff]), "ZW");
        assert_eq!(LOWER.encode(&[0x84, 0x21]), "gggg");
        assert_eq!(LOWER.decode(b"GGGG").unwrap(), vec![0x84, 0x21]);
        assert_eq!(UPPER.decode(b"zw").unwrap(), vec![0xff]);
        assert_eq!(UPPER.decode(b"oOoO").unwrap(), vec![0, 0]);
        assert_eq!(fold('l'), Some('1'));
        assert_eq!(fold('u'), None);
    }
}
