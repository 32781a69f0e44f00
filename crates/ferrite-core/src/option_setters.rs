//! `option_setters!`: the chained setters every options struct offers,
//! so options are written `LsmOptions::default().partitions(4)` and the
//! structs can stay `#[non_exhaustive]` (a new field breaks no caller).
//!
//! Each setter is named after its field and documented by a link to it,
//! so a field's documentation is written once.

/// Generates `pub fn field(mut self, value: Type) -> Self` for each listed
/// field of an options struct.
#[doc(hidden)]
#[macro_export]
macro_rules! option_setters {
    ($ty:ty { $($field:ident: $t:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("Sets [`", stringify!($field), "`](#structfield.", stringify!($field), ").")]
                #[must_use]
                pub fn $field(mut self, value: $t) -> Self {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}

#[cfg(test)]
mod tests {
    #[derive(Debug, Default, PartialEq)]
    struct Knobs {
        size: usize,
        name: Option<&'static str>,
    }

    option_setters!(Knobs { size: usize, name: Option<&'static str> });

    #[test]
    fn setters_chain_and_set_only_their_field() {
        let k = Knobs::default().size(7);
        assert_eq!(
            k,
            Knobs {
                size: 7,
                name: None
            }
        );
        assert_eq!(k.name(Some("x")).name, Some("x"));
    }
}
