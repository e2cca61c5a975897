//! The instruction sets, each declared once: its name, where it can exist, how it is
//! detected, the target features its code is compiled with, the ISA it extends, and its
//! `Lanes` type. From [`isas!`] come the [`Isa`] enum with its names, detection and
//! order, each ISA's `#[target_feature]` entry points, and one lane-check test suite
//! instantiated for every ISA.
//!
//! The `Lanes` implementations live in this module's children (`x86/`, `aarch64/`,
//! `portable.rs`) and their types are visible only inside it: nothing else in the crate
//! can name them, so the generic codecs run on an ISA's lanes only through its entry
//! points here (`unsafe`, compiled with its target features, reached only through a
//! [`crate::Codec`], whose constructor checked the CPU) and its lane checks (which check
//! the CPU first). That is what makes the intrinsics their safe methods call sound.
//!
//! `QUANTFORGE_ISA=scalar|portable|avx2|avx512|neon` caps the choice; a type without a
//! path for the chosen ISA runs the scalar one, and [`crate::Codec::isa`] says which.

use std::sync::OnceLock;

#[cfg(target_arch = "aarch64")]
mod aarch64;
mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;

/// Declares the ISAs. Each row names: the variant and its documentation, the lowercase
/// name, the ISA whose code may also run under it (`extends`), whether detection picks it
/// on its own (`auto`: the portable lanes only run when asked for), the configuration it
/// exists in, the expression that detects it, its `Lanes` type and the target features
/// its entry points enable.
macro_rules! isas {
    ($(
        $(#[$doc:meta])*
        $variant:ident {
            name: $name:literal,
            extends: $parent:ident,
            auto: $auto:literal,
            cfg: ($($cfg:tt)*),
            detect: $detect:expr,
            lanes: $($lanes:ident)::+,
            features: [$($feature:literal),*] $(,)?
        }
    )*) => {
        /// An instruction set a codec path is written for.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Isa {
            /// Safe scalar Rust: the specification.
            Scalar,
            $( $(#[$doc])* $variant, )*
        }

        impl Isa {
            /// Every ISA, in the order of the table: the scalar specification first, then
            /// each ISA after the one it extends.
            pub const ALL: &'static [Isa] = &[Isa::Scalar, $( Isa::$variant, )*];

            /// The lowercase name used by `QUANTFORGE_ISA` and `--isa`.
            pub const fn name(self) -> &'static str {
                match self {
                    Isa::Scalar => "scalar",
                    $( Isa::$variant => $name, )*
                }
            }

            /// The ISA whose code may also run where this one is asked for (`None` for
            /// scalar).
            pub const fn extends(self) -> Option<Isa> {
                match self {
                    Isa::Scalar => None,
                    $( Isa::$variant => Some(Isa::$parent), )*
                }
            }

            /// Whether [`Isa::detect`] picks this ISA when the CPU has it and nothing caps
            /// the choice (the portable lanes, there to test the generic code, run only
            /// when asked for).
            pub const fn is_auto(self) -> bool {
                match self {
                    Isa::Scalar => true,
                    $( Isa::$variant => $auto, )*
                }
            }

            /// Whether this CPU can run code for the ISA.
            pub fn is_supported(self) -> bool {
                match self {
                    Isa::Scalar => true,
                    $( Isa::$variant => {
                        #[cfg($($cfg)*)]
                        let supported = $detect;
                        #[cfg(not($($cfg)*))]
                        let supported = false;
                        supported
                    } )*
                }
            }

            /// The kernels of `ty` on this ISA, `None` when the CPU lacks the ISA or the
            /// type has no path written for it.
            pub(crate) fn kernels(self, ty: crate::GgmlType) -> Option<crate::codecs::Kernels> {
                if !self.is_supported() {
                    return None;
                }
                match self {
                    Isa::Scalar => Some(crate::codecs::scalar_kernels(ty)),
                    $( Isa::$variant => {
                        #[cfg($($cfg)*)]
                        let kernels = crate::codecs::simd_kernels::<entry::$variant>(ty);
                        #[cfg(not($($cfg)*))]
                        let kernels = None;
                        kernels
                    } )*
                }
            }
        }

        /// Each ISA's entry points: the functions compiled with its target features, in
        /// which its lanes run.
        pub(crate) mod entry {
            $(
                #[cfg($($cfg)*)]
                #[allow(non_camel_case_types)]
                #[doc = concat!("The ", $name, " entry points.")]
                pub(crate) struct $variant;

                #[cfg($($cfg)*)]
                crate::simd::entry_points!($variant, super::$($lanes)::+, [$($feature),*]);
            )*
        }

        /// The lane checks, one module per ISA, each the same suite.
        #[cfg(test)]
        mod lane_checks {
            $(
                #[cfg($($cfg)*)]
                #[allow(non_snake_case)]
                mod $variant {
                    crate::simd::lanes::checks::suite!(
                        $variant, super::super::$($lanes)::+, [$($feature),*]
                    );
                }
            )*
        }
    };
}

isas! {
    /// The generic lane code on plain arrays of eight lanes, no intrinsics: runs on any
    /// target (and under an interpreter such as Miri), to test that code by itself.
    Portable {
        name: "portable",
        extends: Scalar,
        auto: false,
        cfg: (all()),
        detect: true,
        lanes: portable::Portable,
        features: [],
    }
    /// x86-64 AVX2 (with F16C, which every AVX2 CPU has).
    Avx2 {
        name: "avx2",
        extends: Scalar,
        auto: true,
        cfg: (target_arch = "x86_64"),
        detect: {
            // cpufeatures has no F16C token; std's detection caches it too.
            cpufeatures::new!(has_avx2, "avx2");
            has_avx2::get() && std::arch::is_x86_feature_detected!("f16c")
        },
        lanes: x86::avx2::Avx2,
        features: ["avx2", "f16c"],
    }
    /// x86-64 AVX-512 F, BW and VL (its entry points also enable AVX2 and F16C, for
    /// their `Narrow` lanes).
    Avx512 {
        name: "avx512",
        extends: Avx2,
        auto: true,
        cfg: (target_arch = "x86_64"),
        detect: {
            cpufeatures::new!(has_avx512, "avx512f", "avx512bw", "avx512vl", "avx2");
            has_avx512::get() && std::arch::is_x86_feature_detected!("f16c")
        },
        lanes: x86::avx512::Avx512,
        features: ["avx512f", "avx512bw", "avx512vl", "avx2", "f16c"],
    }
    /// aarch64 NEON, part of the aarch64 baseline (so chosen at compile time).
    Neon {
        name: "neon",
        extends: Scalar,
        auto: true,
        cfg: (target_arch = "aarch64"),
        detect: cfg!(target_feature = "neon"),
        lanes: aarch64::neon::Neon,
        features: ["neon"],
    }
}

impl Isa {
    /// Parses a name as [`Isa::name`] gives it (case-insensitive).
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL
            .iter()
            .copied()
            .find(|isa| isa.name().eq_ignore_ascii_case(name))
    }

    /// The widest supported ISA that detection picks on its own, or the ISA
    /// `QUANTFORGE_ISA` names when the CPU has it, else the widest below it (read once; an
    /// unknown value is ignored).
    pub fn detect() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            let cap = std::env::var("QUANTFORGE_ISA")
                .ok()
                .and_then(|v| Isa::from_name(v.trim()));
            Self::best_within(cap)
        })
    }

    /// The choice [`Isa::detect`] makes under `cap`.
    fn best_within(cap: Option<Isa>) -> Isa {
        let allowed = |isa: Isa| match cap {
            Some(cap) => isa.runs_under(cap),
            None => isa.is_auto(),
        };
        // Later rows of the table are wider than the ones they extend.
        Isa::ALL
            .iter()
            .rev()
            .copied()
            .find(|&isa| isa.is_supported() && allowed(isa))
            .unwrap_or(Isa::Scalar)
    }

    /// Whether code for `self` may run when the choice is capped at `cap`: `cap` itself
    /// or an ISA it extends, directly or not.
    fn runs_under(self, cap: Isa) -> bool {
        let mut at = Some(cap);
        while let Some(isa) = at {
            if isa == self {
                return true;
            }
            at = isa.extends();
        }
        false
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::Isa;

    #[test]
    fn names_round_trip_and_every_isa_extends_an_earlier_one() {
        for (i, &isa) in Isa::ALL.iter().enumerate() {
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
            assert_eq!(Isa::from_name(&isa.name().to_uppercase()), Some(isa));
            if let Some(base) = isa.extends() {
                let at = Isa::ALL.iter().position(|&b| b == base).unwrap();
                assert!(at < i, "{isa} extends {base}, which comes later");
            }
        }
        assert_eq!(Isa::from_name("sse9"), None);
    }

    #[test]
    fn a_cap_allows_the_isas_it_extends() {
        assert!(Isa::Avx2.runs_under(Isa::Avx512));
        assert!(Isa::Scalar.runs_under(Isa::Avx512));
        assert!(!Isa::Avx512.runs_under(Isa::Avx2));
        assert!(!Isa::Neon.runs_under(Isa::Avx512));
        assert!(!Isa::Portable.runs_under(Isa::Avx2));
        assert_eq!(Isa::best_within(Some(Isa::Scalar)), Isa::Scalar);
        assert_eq!(Isa::best_within(Some(Isa::Portable)), Isa::Portable);
        let auto = Isa::best_within(None);
        assert!(auto.is_supported() && auto.is_auto() && auto != Isa::Portable);
    }
}
