//! `Debug` for the types that must not show all they hold: a URL or a pool
//! keeps a password, a producer or a generic publisher may have no `Debug`
//! at all. Each names the fields it shows; the macro writes them out the
//! one way.

/// Implements `Debug` for `$T` showing only the fields named, in order,
/// each through the function after its colon if there is one (such as
/// `redact::redact`); a trailing `..` marks that there are others
/// (`finish_non_exhaustive`).
macro_rules! debug_showing {
    ($T:ident $(<$P:ident>)? { $($field:ident $(: $show:path)?),* $(,)? }) => {
        impl $(<$P>)? std::fmt::Debug for $T $(<$P>)? {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($T))
                    $(.field(stringify!($field), &$($show)?(&self.$field)))*
                    .finish()
            }
        }
    };
    ($T:ident $(<$P:ident>)? { $($field:ident $(: $show:path)?,)* .. }) => {
        impl $(<$P>)? std::fmt::Debug for $T $(<$P>)? {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($T))
                    $(.field(stringify!($field), &$($show)?(&self.$field)))*
                    .finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use debug_showing;
