//! Serde for the vocabulary by its one spelling (`"one_shot_push"`,
//! `"sm90"`: each type's `name` and `from_name`), and for a table key by its
//! parts and its name in reports.

use serde::de::Error as _;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::document::CapacityEntry;
use crate::vocab::{Algo, Arch, Capacity, Collective, DType, Link, Mode, TableKey};

macro_rules! by_name {
    ($($ty:ty: $what:literal),+ $(,)?) => {$(
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.name())
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                <$ty>::from_name(&text)
                    .ok_or_else(|| D::Error::custom(format!("unknown {} `{text}`", $what)))
            }
        }
    )+};
}

by_name!(
    Algo: "algorithm",
    Arch: "arch",
    Collective: "collective",
    DType: "dtype",
    Link: "link",
    Mode: "mode",
);

/// `{"name": "all_reduce ws8 bf16 graph", "collective": "all_reduce",
/// "world_size": 8, "dtype": "bf16", "mode": "graph"}`.
impl Serialize for TableKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut key = serializer.serialize_struct("TableKey", 5)?;
        key.serialize_field("name", &self.to_string())?;
        key.serialize_field("collective", &self.collective)?;
        key.serialize_field("world_size", &self.world_size)?;
        key.serialize_field("dtype", &self.dtype)?;
        key.serialize_field("mode", &self.mode)?;
        key.end()
    }
}

/// A [`CapacityEntry`] as `[[capacity]]` and the evidence spell it:
/// `{"collective", "algo", "max_bytes", "align"}`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FlatCapacity {
    collective: Collective,
    algo: Algo,
    max_bytes: u64,
    align: u64,
}

impl From<CapacityEntry> for FlatCapacity {
    fn from(e: CapacityEntry) -> Self {
        FlatCapacity {
            collective: e.collective,
            algo: e.algo,
            max_bytes: e.capacity.max_bytes,
            align: e.capacity.align,
        }
    }
}

impl From<FlatCapacity> for CapacityEntry {
    fn from(f: FlatCapacity) -> Self {
        CapacityEntry {
            collective: f.collective,
            algo: f.algo,
            capacity: Capacity {
                max_bytes: f.max_bytes,
                align: f.align,
            },
        }
    }
}
