//! Byte sizes: `format_size` and `parse_size` agree, decimal and binary units relate as 1000^j
//! to 1024^j, and no input makes the parser panic or lose the input in its error.

use proptest::prelude::*;
use windrose_model::units::{format_size, parse_size, SIZE_UNITS};

/// (decimal, binary, short prefix) per power: kB/KiB/k, MB/MiB/M, …
const PREFIXES: [(&str, &str, &str); 4] = [
    ("kB", "KiB", "k"),
    ("MB", "MiB", "M"),
    ("GB", "GiB", "G"),
    ("TB", "TiB", "T"),
];

#[test]
fn every_unit_is_a_power_of_1000_or_1024() {
    for (name, m) in SIZE_UNITS {
        let power = name.trim_end_matches('B');
        let expect = match power {
            "" => 1,
            "k" | "K" => 1_000,
            "M" => 1_000_000,
            "G" => 1_000_000_000,
            "T" => 1_000_000_000_000,
            "Ki" => 1 << 10,
            "Mi" => 1 << 20,
            "Gi" => 1 << 30,
            "Ti" => 1 << 40,
            other => panic!("unexpected unit {other}"),
        };
        assert_eq!(m, expect, "{name}");
        assert_eq!(parse_size(&format!("3{name}")), Ok(3 * m), "{name}");
    }
}

proptest! {
    #[test]
    fn binary_and_decimal_units_relate(k in 0u64..(1 << 23), j in 0usize..4) {
        let (dec, bin, short) = PREFIXES[j];
        let d = parse_size(&format!("{k}{dec}")).unwrap();
        let b = parse_size(&format!("{k} {bin}")).unwrap();
        let p = (j + 1) as u32;
        prop_assert_eq!(u128::from(d), u128::from(k) * 1000u128.pow(p));
        prop_assert_eq!(u128::from(b) * 1000u128.pow(p), u128::from(d) * 1024u128.pow(p));
        prop_assert_eq!(parse_size(&format!("{k}{short}")).unwrap(), d);
        prop_assert_eq!(parse_size(&format!("{k}{}", bin.trim_end_matches('B'))).unwrap(), b);
        prop_assert_eq!(parse_size(&format!("{k}B")).unwrap(), k);
        prop_assert_eq!(parse_size(&k.to_string()).unwrap(), k);
        // Lower-case MB and friends are refused rather than guessed (millibits? megabits?).
        let lower = format!("{k}{}", dec.to_ascii_lowercase());
        prop_assert!(parse_size(&lower).is_err(), "{}", lower);
    }

    #[test]
    fn decimal_fractions_are_exact(int in 0u64..1000, cents in 0u64..100, j in 0usize..4) {
        let (dec, _, _) = PREFIXES[j];
        let m = 1000u64.pow(j as u32 + 1);
        let s = format!("{int}.{cents:02} {dec}");
        prop_assert_eq!(parse_size(&s).unwrap(), int * m + cents * (m / 100));
    }

    #[test]
    fn format_then_parse_is_exact_for_round_sizes(
        k in 1u64..100_000,
        j in 1u32..=4,
        decimal in any::<bool>(),
    ) {
        // k × 1024^j, or k hundredths of a decimal unit of that size or below.
        let x = if decimal { k * 1000u64.pow(j) / 100 } else { k << (10 * j) };
        let s = format_size(x);
        prop_assert_eq!(parse_size(&s).unwrap(), x, "{}", s);
    }

    #[test]
    fn format_then_parse_is_within_half_a_percent(x in any::<u64>()) {
        let s = format_size(x);
        let back = parse_size(&s).unwrap();
        prop_assert!(back.abs_diff(x) as f64 <= x as f64 / 200.0, "{} -> {} -> {}", x, s, back);
        if x < 1000 {
            prop_assert_eq!(back, x);
        }
    }

    #[test]
    fn any_input_parses_or_is_named_in_the_error(s in "[0-9 ._eE+-]{0,12}[A-Za-z]{0,4}") {
        if let Err(e) = parse_size(&s) {
            prop_assert!(e.to_string().contains(&format!("{s:?}")), "{}", e);
        }
    }
}
