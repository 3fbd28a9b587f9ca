//! Serde for the shared vocabulary (`Algo`, `Arch`, …) by its one spelling
//! (`"one_shot_push"`, `"sm90"`), for `#[serde(with = "named")]` fields. The
//! vocabulary crate has no serde of its own; its `name`/`from_name` pairs are
//! the spelling everywhere, so this module only adapts them.

use policy::{Algo, Arch, Collective, DType, Link, Mode};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

/// A vocabulary type with one textual spelling.
pub trait Named: Sized {
    /// What the type is called in error messages ("algorithm", "dtype", …).
    const WHAT: &'static str;
    fn spelling(&self) -> String;
    fn from_spelling(text: &str) -> Option<Self>;
}

macro_rules! named_by_name {
    ($ty:ty, $what:literal) => {
        impl Named for $ty {
            const WHAT: &'static str = $what;
            fn spelling(&self) -> String {
                self.name().to_string()
            }
            fn from_spelling(text: &str) -> Option<Self> {
                <$ty>::from_name(text)
            }
        }
    };
}

named_by_name!(Algo, "algorithm");
named_by_name!(Arch, "arch");
named_by_name!(Collective, "collective");
named_by_name!(DType, "dtype");
named_by_name!(Link, "link");
named_by_name!(Mode, "mode");

pub fn serialize<T: Named, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&value.spelling())
}

pub fn deserialize<'de, T: Named, D: Deserializer<'de>>(deserializer: D) -> Result<T, D::Error> {
    let text = String::deserialize(deserializer)?;
    T::from_spelling(&text).ok_or_else(|| D::Error::custom(format!("unknown {} `{text}`", T::WHAT)))
}
