// The two macros of the WIT conversions (`convert.rs`, `convert_effects.rs`), spliced with
// `include!` where they are used.

/// Both directions of a one-to-one enum mapping.
macro_rules! enum_map {
    ($to:ident, $from:ident, $core:path, $wit:path, { $($c:ident <=> $w:ident),* $(,)? }) => {
        pub(crate) fn $to(v: $core) -> $wit {
            use $core as C;
            use $wit as W;
            match v { $(C::$c => W::$w,)* }
        }
        pub(crate) fn $from(v: $wit) -> $core {
            use $core as C;
            use $wit as W;
            match v { $(W::$w => C::$c,)* }
        }
    };
}

/// A pair of conversions between a core struct and its WIT record with the same field names;
/// `field => (to, from)` converts a field with a pair of functions, other fields move as they are.
macro_rules! struct_map {
    ($to:ident, $from:ident, $core:path, $wit:path, { $($f:ident $(=> ($tf:ident, $ff:ident))?),* $(,)? }) => {
        pub(crate) fn $to(v: $core) -> $wit {
            use $wit as W;
            W { $($f: struct_map!(@via v.$f $(, $tf)?),)* }
        }
        pub(crate) fn $from(v: $wit) -> $core {
            use $core as C;
            C { $($f: struct_map!(@via v.$f $(, $ff)?),)* }
        }
    };
    (@via $e:expr) => { $e };
    (@via $e:expr, $f:ident) => { $f($e) };
}
