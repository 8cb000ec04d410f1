//! Names: of machines, mailboxes and teams, and of the people who own
//! machines.
//!
//! A [`Name`] is what people type in addresses (`api@bob-laptop`), so it has
//! a small alphabet that survives shells, URLs, file names and being read
//! aloud: lowercase ASCII letters, digits and `-`, 1 to 32 characters,
//! starting with a letter or digit (so a name can never be mistaken for a
//! command-line flag). An [`Owner`] names a person and is shown, not typed
//! into addresses, so it may hold any printable text.

use std::fmt;

/// The longest machine, mailbox or team name, in characters.
pub const MAX_NAME_LEN: usize = 32;

/// The longest owner name, in bytes of UTF-8. Enough for a full name in any
/// script; short enough for a table column.
pub const MAX_OWNER_LEN: usize = 64;

/// The rule a [`Name`] follows, as error messages state it.
pub const NAME_RULE: &str =
    "use 1-32 lowercase letters a-z, digits 0-9 and '-', starting with a letter or digit";

/// The rule an [`Owner`] follows, as error messages state it.
pub const OWNER_RULE: &str = "use 1-64 bytes of printable text, without control or invisible formatting characters or leading or trailing spaces";

/// A name that breaks the rules, and which rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {value:?}: {problem}; {rule}")]
pub struct NameError {
    /// What the name was for: "machine name", "mailbox name", "team name", "owner".
    pub kind: &'static str,
    /// The refused input.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
    /// The rule, in words.
    pub rule: &'static str,
}

/// A machine, mailbox or team name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(String);

impl Name {
    /// Checks `value` against the name rule. `kind` says what the name is for
    /// ("machine name", "mailbox name", "team name") in the error.
    pub fn parse(kind: &'static str, value: &str) -> Result<Self, NameError> {
        let fail = |problem: String| NameError {
            kind,
            value: value.to_owned(),
            problem,
            rule: NAME_RULE,
        };
        if value.is_empty() {
            return Err(fail("it is empty".into()));
        }
        if let Some((i, c)) = value
            .chars()
            .enumerate()
            .find(|(_, c)| !matches!(c, 'a'..='z' | '0'..='9' | '-'))
        {
            let what = if c.is_ascii_uppercase() {
                "uppercase letter"
            } else {
                "character"
            };
            return Err(fail(format!(
                "{what} {c:?} at position {} is not allowed",
                i + 1
            )));
        }
        if value.len() > MAX_NAME_LEN {
            return Err(fail(format!("it is {} characters long", value.len())));
        }
        if value.starts_with('-') {
            return Err(fail("it starts with '-'".into()));
        }
        Ok(Name(value.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The person who runs a machine, as they call themselves.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner(String);

impl Owner {
    /// Checks `value` against the owner rule.
    pub fn parse(value: &str) -> Result<Self, NameError> {
        let fail = |problem: &str| NameError {
            kind: "owner",
            value: value.to_owned(),
            problem: problem.to_owned(),
            rule: OWNER_RULE,
        };
        if value.is_empty() {
            return Err(fail("it is empty"));
        }
        if value.len() > MAX_OWNER_LEN {
            return Err(fail("it is too long"));
        }
        if let Some(problem) = one_line_problem(value) {
            return Err(fail(problem));
        }
        if value.trim() != value {
            return Err(fail("it has leading or trailing spaces"));
        }
        Ok(Owner(value.to_owned()))
    }

    /// The owner as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Characters that change how surrounding text is displayed without being
/// visible themselves: bidirectional overrides and isolates, zero-width
/// characters and the byte-order mark. An owner holding one could show as
/// another person's name; text holding one can reorder a terminal line.
pub fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'                      // soft hyphen
            | '\u{061C}'                // Arabic letter mark
            | '\u{115F}' | '\u{1160}' | '\u{3164}' // Hangul fillers
            | '\u{180E}'                // Mongolian vowel separator
            | '\u{200B}'..='\u{200F}'  // zero-width characters, LRM, RLM
            | '\u{2028}' | '\u{2029}'  // line and paragraph separators
            | '\u{202A}'..='\u{202E}'  // bidirectional embeddings and overrides
            | '\u{2060}'..='\u{2064}'  // word joiner, invisible operators
            | '\u{2066}'..='\u{206F}'  // bidirectional isolates, deprecated format controls
            | '\u{FEFF}'                // byte-order mark
            | '\u{FFF9}'..='\u{FFFB}'  // interlinear annotation controls
            | '\u{E0000}'..='\u{E007F}' // tag characters
    )
}

/// Why `text` is not one line of plain text, if it is not: a control
/// character (a line break, an escape sequence) or an invisible
/// formatting character. Owners and the names clients give themselves
/// (`who.name`) follow this rule, since both are shown to other people.
pub fn one_line_problem(text: &str) -> Option<&'static str> {
    if text.chars().any(char::is_control) {
        return Some("it holds a control character (a line break or an escape sequence)");
    }
    if text.chars().any(is_invisible_format) {
        return Some(
            "it holds an invisible formatting character (a direction override or zero-width character)",
        );
    }
    None
}

/// `text` made one line of plain text: every character
/// [`one_line_problem`] names becomes `?`, and it is cut to at most `max`
/// bytes (at a character boundary). For names taken from elsewhere (an
/// MCP client's name, `$USER`) before they are given as `who.name`.
pub fn to_one_line(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let c = if c.is_control() || is_invisible_format(c) {
            '?'
        } else {
            c
        };
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

/// The longest DNS name an address may hold (RFC 1035's limit).
pub const MAX_DNS_NAME_LEN: usize = 253;

/// Whether an address a peer gave is fit to store and show: its text form
/// is printable ASCII (no control or formatting character: once, a
/// stranger's `/dns4/` name carried escape sequences that retitled a
/// terminal, cleared it and wrote its clipboard), and every DNS name in it
/// is a hostname (letters, digits, `-` and `.`; international names are
/// written in their ASCII form).
pub fn is_clean_address(addr: &multiaddr::Multiaddr) -> bool {
    use multiaddr::Protocol;
    let hostname = |name: &str| {
        !name.is_empty()
            && name.len() <= MAX_DNS_NAME_LEN
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    };
    addr.iter().all(|p| match p {
        Protocol::Dns(n) | Protocol::Dns4(n) | Protocol::Dns6(n) | Protocol::Dnsaddr(n) => {
            hostname(&n)
        }
        _ => true,
    }) && addr.to_string().chars().all(|c| c.is_ascii_graphic())
}

/// Decodes a name field, turning a rule violation into a decode error.
pub(crate) fn name_field(
    fields: &mut crate::cbor::Fields,
    field: &'static str,
    kind: &'static str,
) -> Result<Name, crate::DecodeError> {
    let text = fields.text(field, MAX_NAME_LEN)?;
    Name::parse(kind, &text).map_err(|e| fields.error(field, e.problem))
}

/// Decodes an owner field, turning a rule violation into a decode error.
pub(crate) fn owner_field(
    fields: &mut crate::cbor::Fields,
    field: &'static str,
) -> Result<Owner, crate::DecodeError> {
    let text = fields.text(field, MAX_OWNER_LEN)?;
    Owner::parse(&text).map_err(|e| fields.error(field, e.problem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_alphabet() {
        for ok in ["a", "bob-laptop", "0", "x1-2-3", &"a".repeat(32)] {
            assert_eq!(Name::parse("machine name", ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn refuses_with_the_rule() {
        let cases = [
            ("", "it is empty"),
            ("Bob", "uppercase letter 'B' at position 1 is not allowed"),
            ("bob laptop", "character ' ' at position 4 is not allowed"),
            ("bob_laptop", "character '_' at position 4 is not allowed"),
            ("héllo", "character 'é' at position 2 is not allowed"),
            ("-rm", "it starts with '-'"),
        ];
        for (input, problem) in cases {
            let e = Name::parse("mailbox name", input).unwrap_err();
            assert_eq!(e.problem, problem, "input {input:?}");
            assert!(e.to_string().contains(NAME_RULE));
            assert!(e.to_string().starts_with("invalid mailbox name"));
        }
        let long = "a".repeat(33);
        assert_eq!(
            Name::parse("team name", &long).unwrap_err().problem,
            "it is 33 characters long"
        );
    }

    #[test]
    fn owners() {
        assert!(Owner::parse("Zoë Example").is_ok());
        assert!(Owner::parse("").is_err());
        assert!(Owner::parse(" alice").is_err());
        assert!(Owner::parse("a\nb").is_err());
        assert!(Owner::parse(&"x".repeat(65)).is_err());
        assert!(Owner::parse("ali\u{202E}ce").is_err());
        assert!(Owner::parse("bob\u{200B}").is_err());
    }
}
