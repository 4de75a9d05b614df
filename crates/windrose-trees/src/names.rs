//! Enums whose members have names (on the command line, in files, in output):
//! [`named_enum!`](crate::named_enum) declares the members and their names once, and derives
//! from that one list `ALL`, `NAMES`, `name()`, `Display`, `FromStr` (with an error listing every
//! name) and serde (by name), so a new member cannot be missing from any of them.
//!
//! ```
//! windrose_trees::named_enum! {
//!     /// A colour.
//!     #[derive(Copy, Clone, Debug, PartialEq, Eq)]
//!     pub enum Colour: "colour" {
//!         /// Red.
//!         Red = "red",
//!         /// Dark blue.
//!         DarkBlue = "dark-blue",
//!     }
//! }
//! assert_eq!(Colour::ALL, [Colour::Red, Colour::DarkBlue]);
//! assert_eq!("dark-blue".parse::<Colour>().unwrap(), Colour::DarkBlue);
//! assert_eq!(Colour::Red.to_string(), "red");
//! let e = "green".parse::<Colour>().unwrap_err();
//! assert_eq!(e.to_string(), "unknown colour \"green\": expected one of red, dark-blue");
//! ```

/// A name that is not one of an enum's; the message lists the valid ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {input:?}: expected one of {}", expected.join(", "))]
pub struct UnknownName {
    /// What was being named (`tree algorithm`).
    pub what: &'static str,
    /// The name given.
    pub input: String,
    /// Every valid name.
    pub expected: &'static [&'static str],
}

/// Declares an enum whose members each have a name; see the [module docs](crate::names).
///
/// Syntax: attributes, `pub enum Name: "what it is" { Variant = "name", … }`. The enum gets
/// `ALL` and `NAMES` (declaration order), `name()`, `Display`, `FromStr` (surrounding blanks
/// ignored; error [`UnknownName`](crate::names::UnknownName)) and serde `Serialize` /
/// `Deserialize` as the name. Derive everything else yourself (but not serde).
#[macro_export]
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every member, in declaration order.
            pub const ALL: [$name; [$(stringify!($variant)),+].len()] = [$($name::$variant),+];

            /// The name of every member, in the order of `ALL`.
            pub const NAMES: [&'static str; [$(stringify!($variant)),+].len()] = [$($text),+];

            /// The name used on the command line, in files and in output.
            pub const fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::names::UnknownName;

            fn from_str(s: &str) -> ::std::result::Result<Self, Self::Err> {
                let t = s.trim();
                $name::ALL
                    .into_iter()
                    .find(|m| m.name() == t)
                    .ok_or_else(|| $crate::names::UnknownName {
                        what: $what,
                        input: s.to_string(),
                        expected: &$name::NAMES,
                    })
            }
        }

        impl $crate::names::__serde::Serialize for $name {
            fn serialize<S: $crate::names::__serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.name())
            }
        }

        impl<'de> $crate::names::__serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::names::__serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::std::result::Result<Self, D::Error> {
                struct Visitor;
                impl $crate::names::__serde::de::Visitor<'_> for Visitor {
                    type Value = $name;

                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        write!(f, "a {}: one of {}", $what, $name::NAMES.join(", "))
                    }

                    fn visit_str<E: $crate::names::__serde::de::Error>(
                        self,
                        v: &str,
                    ) -> ::std::result::Result<$name, E> {
                        v.parse().map_err(E::custom)
                    }
                }
                deserializer.deserialize_str(Visitor)
            }
        }
    };
}

#[doc(hidden)]
pub use serde as __serde;
