//! Times in JSON are whole nanoseconds, in every tiermem result. Structs
//! that keep another unit for their tables serialize through these
//! (`#[serde(rename = "x_ns", with = "tiermem_host::ns::seconds")]`).

use serde::{Deserialize, Deserializer, Serializer};

fn to_ns<S: Serializer>(value: f64, per_unit: f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64((value * per_unit).round().max(0.0) as u64)
}

fn from_ns<'de, D: Deserializer<'de>>(d: D, per_unit: f64) -> Result<f64, D::Error> {
    Ok(f64::deserialize(d)? / per_unit)
}

fn opt_to_ns<S: Serializer>(value: Option<f64>, per_unit: f64, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => s.serialize_some(&((v * per_unit).round().max(0.0) as u64)),
        None => s.serialize_none(),
    }
}

fn opt_from_ns<'de, D: Deserializer<'de>>(d: D, per_unit: f64) -> Result<Option<f64>, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.map(|ns| ns / per_unit))
}

macro_rules! unit {
    ($name:ident, $opt:ident, $per_unit:expr, $what:literal) => {
        #[doc = concat!("An `f64` of ", $what, ", as nanoseconds.")]
        pub mod $name {
            use super::*;
            pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
                to_ns(*v, $per_unit, s)
            }
            pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
                from_ns(d, $per_unit)
            }
        }

        #[doc = concat!("An `Option<f64>` of ", $what, ", as nanoseconds or null.")]
        pub mod $opt {
            use super::*;
            pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
                opt_to_ns(*v, $per_unit, s)
            }
            pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
                opt_from_ns(d, $per_unit)
            }
        }
    };
}

unit!(seconds, opt_seconds, 1e9, "seconds");
unit!(millis, opt_millis, 1e6, "milliseconds");
unit!(micros, opt_micros, 1e3, "microseconds");

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Times {
        #[serde(rename = "elapsed_ns", with = "super::seconds")]
        elapsed_s: f64,
        #[serde(rename = "p50_ns", with = "super::opt_millis")]
        p50_ms: Option<f64>,
        #[serde(rename = "mean_ns", with = "super::micros")]
        mean_us: f64,
    }

    #[test]
    fn times_go_out_as_whole_nanoseconds_and_come_back() {
        let t = Times {
            elapsed_s: 1.5,
            p50_ms: Some(0.25),
            mean_us: 41.237,
        };
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"elapsed_ns": 1_500_000_000u64, "p50_ns": 250_000, "mean_ns": 41_237})
        );
        let back: Times = serde_json::from_value(json).unwrap();
        assert_eq!(back, t);
        let none = Times {
            p50_ms: None,
            ..back
        };
        assert_eq!(
            serde_json::to_value(&none).unwrap()["p50_ns"],
            serde_json::Value::Null
        );
    }
}
