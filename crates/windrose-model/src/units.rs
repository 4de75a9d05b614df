//! Byte sizes: the one parser every command-line flag, scenario file and job uses, and the one
//! formatter for people.
//!
//! Decimal units are powers of 1000 (`kB`/`KB`/`k`/`K`, `MB`/`M`, `GB`/`G`, `TB`/`T`), binary
//! units powers of 1024 (`KiB`/`Ki`, `MiB`/`Mi`, `GiB`/`Gi`, `TiB`/`Ti`); a plain number is
//! bytes and `B` is optional. Units are case-sensitive (`mb` could be millibits or megabits, so
//! it is refused rather than guessed). The number may have a fraction, an exponent and `_`
//! separators, and is read exactly (no floating point): the result must be a whole number of
//! bytes.
//!
//! ```
//! use windrose_model::units::{format_size, parse_size};
//! assert_eq!(parse_size("64MB").unwrap(), 64_000_000);
//! assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
//! assert_eq!(parse_size("1.5 GB").unwrap(), 1_500_000_000);
//! assert_eq!(format_size(64 << 20), "64 MiB");
//! assert!(parse_size("64 mb").unwrap_err().to_string().contains("\"mb\""));
//! ```

/// The units [`parse_size`] knows, with their multipliers, in help-text order.
pub const SIZE_UNITS: [(&str, u64); 19] = [
    ("B", 1),
    ("kB", 1_000),
    ("KB", 1_000),
    ("k", 1_000),
    ("K", 1_000),
    ("KiB", 1 << 10),
    ("Ki", 1 << 10),
    ("MB", 1_000_000),
    ("M", 1_000_000),
    ("MiB", 1 << 20),
    ("Mi", 1 << 20),
    ("GB", 1_000_000_000),
    ("G", 1_000_000_000),
    ("GiB", 1 << 30),
    ("Gi", 1 << 30),
    ("TB", 1_000_000_000_000),
    ("T", 1_000_000_000_000),
    ("TiB", 1 << 40),
    ("Ti", 1 << 40),
];

/// Why a string is not a byte size; every message quotes the input.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum SizeError {
    /// No number, or a malformed one.
    #[error(
        "{input:?} is not a byte size: expected an integer or a number with a unit, e.g. 24, \
         \"64MiB\", \"1.5 GB\", \"256KiB\""
    )]
    NotANumber {
        /// The input.
        input: String,
    },
    /// A unit [`parse_size`] does not know.
    #[error(
        "{input:?}: unknown unit {unit:?}: expected B, kB, KiB, MB, MiB, GB, GiB, TB or TiB \
         (MB = 10^6 bytes, MiB = 2^20; units are case-sensitive)"
    )]
    UnknownUnit {
        /// The input.
        input: String,
        /// The unit as written.
        unit: String,
    },
    /// More than `u64::MAX` bytes.
    #[error("{input:?} is too large: at most 18446744073709551615 bytes (16 EiB)")]
    TooLarge {
        /// The input.
        input: String,
    },
    /// More significant digits than can be read exactly (38).
    #[error("{input:?} has too many significant digits (at most 38)")]
    TooManyDigits {
        /// The input.
        input: String,
    },
    /// A fraction of a byte (`1.5 B`; `0.1 kB` is fine).
    #[error("{input:?} is not a whole number of bytes")]
    NotWhole {
        /// The input.
        input: String,
    },
}

/// Parses a byte size: `"24"`, `"24B"`, `"64MB"` (64 000 000), `"64MiB"` (67 108 864),
/// `"1.5 GB"`, `"256KiB"`, `"100kB"`, `"1e6"`, `"1_000"`; see the [module docs](self).
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let input = || s.to_string();
    let (number, unit) = split_number(s.trim());
    if number.is_empty() {
        return Err(SizeError::NotANumber { input: input() });
    }
    let unit = unit.trim();
    let mult = match unit {
        "" => 1,
        _ => SIZE_UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|&(_, m)| m)
            .ok_or_else(|| SizeError::UnknownUnit {
                input: input(),
                unit: unit.to_string(),
            })?,
    };
    let d = Decimal::parse(number).map_err(|e| match e {
        Unreadable::NotANumber => SizeError::NotANumber { input: input() },
        Unreadable::TooManyDigits => SizeError::TooManyDigits { input: input() },
    })?;
    d.times(mult).map_err(|e| match e {
        Inexact::TooLarge => SizeError::TooLarge { input: input() },
        Inexact::NotWhole => SizeError::NotWhole { input: input() },
    })
}

/// Splits `t` after its leading number: digits, `_`, `.`, and an exponent (`e`, an optional
/// sign, digits). No unit starts with `e` or `E`.
fn split_number(t: &str) -> (&str, &str) {
    let b = t.as_bytes();
    let mut i = 0;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_' || b[i] == b'.') {
        i += 1;
    }
    if i > 0 && i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let digits = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > digits {
            i = j;
        } else {
            // `e` without digits: keep it in the number so the error says "not a byte size".
            i = b.len();
        }
    }
    t.split_at(i)
}

/// `mantissa × 10^exp`, read exactly from decimal text.
struct Decimal {
    mantissa: u128,
    exp: i64,
}

enum Unreadable {
    NotANumber,
    TooManyDigits,
}

enum Inexact {
    TooLarge,
    NotWhole,
}

impl Decimal {
    /// `[digits][.digits][e[+-]digits]` with `_` allowed among the digits; at least one digit.
    fn parse(s: &str) -> Result<Decimal, Unreadable> {
        let (body, mut exp) = match s.find(['e', 'E']) {
            Some(i) => (
                &s[..i],
                s[i + 1..]
                    .parse::<i64>()
                    .map_err(|_| Unreadable::NotANumber)?,
            ),
            None => (s, 0),
        };
        let (int, frac) = body.split_once('.').unwrap_or((body, ""));
        if frac.contains('.') {
            return Err(Unreadable::NotANumber);
        }
        // Trailing zeros of the fraction change nothing.
        let frac = frac.trim_end_matches(['0', '_']);
        let mut mantissa: u128 = 0;
        let mut digits = 0usize;
        for (part, is_frac) in [(int, false), (frac, true)] {
            for c in part.chars().filter(|&c| c != '_') {
                let d = c.to_digit(10).ok_or(Unreadable::NotANumber)?;
                digits += 1;
                match mantissa
                    .checked_mul(10)
                    .and_then(|m| m.checked_add(d.into()))
                {
                    Some(m) => {
                        mantissa = m;
                        exp -= i64::from(is_frac);
                    }
                    // A long run of zeros in the integer part only scales it.
                    None if !is_frac && d == 0 => exp += 1,
                    None => return Err(Unreadable::TooManyDigits),
                }
            }
        }
        // `body` had digits, or only zeros of a fraction that were trimmed ("0.000").
        if digits == 0 && !body.chars().any(|c| c.is_ascii_digit()) {
            return Err(Unreadable::NotANumber);
        }
        Ok(Decimal { mantissa, exp })
    }

    /// `self × mult` as a whole number of bytes.
    fn times(&self, mult: u64) -> Result<u64, Inexact> {
        if self.mantissa == 0 {
            return Ok(0);
        }
        let m = self
            .mantissa
            .checked_mul(u128::from(mult))
            .ok_or(Inexact::TooLarge)?;
        let v = if self.exp >= 0 {
            u32::try_from(self.exp)
                .ok()
                .and_then(|e| 10u128.checked_pow(e))
                .and_then(|p| m.checked_mul(p))
                .ok_or(Inexact::TooLarge)?
        } else {
            let p = u32::try_from(self.exp.unsigned_abs())
                .ok()
                .and_then(|e| 10u128.checked_pow(e))
                .ok_or(Inexact::NotWhole)?;
            if !m.is_multiple_of(p) {
                return Err(Inexact::NotWhole);
            }
            m / p
        };
        u64::try_from(v).map_err(|_| Inexact::TooLarge)
    }
}

/// `bytes` for people: `1.5 GB`, `64 MB`, `64 MiB`, `24 B`, `16.78 MB`. The largest decimal
/// unit it reaches when two decimals show it exactly, else the largest binary unit that divides
/// it, else the decimal unit rounded to two decimals.
pub fn format_size(bytes: u64) -> String {
    const DEC: [(&str, u64); 4] = [
        ("TB", 1_000_000_000_000),
        ("GB", 1_000_000_000),
        ("MB", 1_000_000),
        ("kB", 1_000),
    ];
    const BIN: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    let Some((dec_unit, m)) = DEC.into_iter().find(|&(_, m)| bytes >= m) else {
        return format!("{bytes} B");
    };
    let cents = m / 100;
    if bytes.is_multiple_of(cents) {
        let frac = format!(".{:02}", bytes % m / cents);
        let frac = frac.trim_end_matches('0').trim_end_matches('.');
        return format!("{}{frac} {dec_unit}", bytes / m);
    }
    if let Some((u, b)) = BIN
        .into_iter()
        .find(|&(_, b)| bytes >= b && bytes.is_multiple_of(b))
    {
        return format!("{} {u}", bytes / b);
    }
    let v = format!("{:.2}", bytes as f64 / m as f64);
    format!(
        "{} {dec_unit}",
        v.trim_end_matches('0').trim_end_matches('.')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("24"), Ok(24));
        assert_eq!(parse_size("24B"), Ok(24));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("64MB"), Ok(64_000_000));
        assert_eq!(parse_size("64M"), Ok(64_000_000));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64Mi"), Ok(64 << 20));
        assert_eq!(parse_size("1.5 GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("2G"), Ok(2_000_000_000));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("256KiB"), Ok(256 << 10));
        assert_eq!(parse_size("100kB"), Ok(100_000));
        assert_eq!(parse_size("100KB"), Ok(100_000));
        assert_eq!(parse_size("512k"), Ok(512_000));
        assert_eq!(parse_size("512K"), Ok(512_000));
        assert_eq!(parse_size("3TB"), Ok(3_000_000_000_000));
        assert_eq!(parse_size("3T"), Ok(3_000_000_000_000));
        assert_eq!(parse_size("3TiB"), Ok(3 << 40));
        assert_eq!(parse_size("3Ti"), Ok(3 << 40));
        assert_eq!(parse_size("1_000"), Ok(1000));
        assert_eq!(parse_size("1e6"), Ok(1_000_000));
        assert_eq!(parse_size("1E+6 B"), Ok(1_000_000));
        assert_eq!(parse_size("2.5e-3 MB"), Ok(2_500));
        assert_eq!(parse_size(" 3 MiB "), Ok(3 << 20));
        assert_eq!(parse_size(".5kB"), Ok(500));
        assert_eq!(parse_size("0.1 kB"), Ok(100));
        assert_eq!(parse_size("0.3 kB"), Ok(300));
        assert_eq!(parse_size("0.000"), Ok(0));
        assert_eq!(
            parse_size("1.50000000000000000000000000000000000000000000 kB"),
            Ok(1500)
        );
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_size("16777215 TiB"), Ok(16_777_215 << 40));
    }

    #[test]
    fn bad_sizes_name_the_input() {
        let e = |s: &str| parse_size(s).unwrap_err();
        assert_eq!(
            e("18446744073709551616"),
            SizeError::TooLarge {
                input: "18446744073709551616".into()
            }
        );
        assert!(matches!(e("16777216 TiB"), SizeError::TooLarge { .. }));
        assert!(matches!(
            e(&format!("1{}", "0".repeat(50))),
            SizeError::TooLarge { .. }
        ));
        assert!(matches!(
            e(&format!("1.{}1e50", "0".repeat(50))),
            SizeError::TooManyDigits { .. }
        ));
        assert!(matches!(e("1e30"), SizeError::TooLarge { .. }));
        assert!(matches!(e("1.5 B"), SizeError::NotWhole { .. }));
        assert!(matches!(e("1e-1"), SizeError::NotWhole { .. }));
        assert!(matches!(e("0.0001 kB"), SizeError::NotWhole { .. }));
        for s in [
            "", "MiB", "-1", "1.2.3", "1e", "1e+", "inf", "NaN", "_", ".", "1..2", "1_.e",
        ] {
            assert_eq!(e(s), SizeError::NotANumber { input: s.into() });
            assert!(e(s)
                .to_string()
                .starts_with(&format!("{s:?} is not a byte size")));
        }
        for (s, unit) in [
            ("12 parsecs", "parsecs"),
            ("64mb", "mb"),
            ("1mib", "mib"),
            ("4 Mb", "Mb"),
            ("1 TIB", "TIB"),
        ] {
            assert_eq!(
                e(s),
                SizeError::UnknownUnit {
                    input: s.into(),
                    unit: unit.into()
                }
            );
            let m = e(s).to_string();
            assert!(m.contains(&format!("{s:?}")) && m.contains("MiB"), "{m}");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(64 << 20), "64 MiB");
        assert_eq!(format_size(24), "24 B");
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1_500_000_000), "1.5 GB");
        assert_eq!(format_size(64_000_000), "64 MB");
        assert_eq!(format_size(16_777_216), "16 MiB");
        assert_eq!(format_size(16_780_000), "16.78 MB");
        assert_eq!(format_size(1024), "1 KiB");
        assert_eq!(format_size(1000), "1 kB");
        assert_eq!(format_size(1_024_000), "1000 KiB");
        assert_eq!(format_size(128_000), "128 kB");
        assert_eq!(format_size(1_010_000), "1.01 MB");
        assert_eq!(format_size(3 << 40), "3 TiB");
        assert_eq!(format_size(1_999), "2 kB");
        assert_eq!(format_size(u64::MAX), "18446744.07 TB");
    }
}
