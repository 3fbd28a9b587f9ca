//! A compiled table set as a value, and which one this process dispatches with.
//!
//! Every `include_tuned!` expansion defines `select`, `capacity`, `table_arch`
//! and `PLATFORMS` in the invoking module, and a `static TABLES: Tables` that
//! bundles them. `const` callers use the functions directly; a dispatcher that
//! is compiled before the engine that uses it (`kernels`) cannot name the
//! engine's functions, so it asks [`tables_in_use`] instead, and the engine
//! hands its tables over once with [`use_tables`].

use core::fmt;
use std::sync::OnceLock;

use crate::{Algo, Arch, Capacity, Collective, Link, PlatformInfo, Query};

/// One folder of `tuned/*.toml` files, compiled by `include_tuned!`: the
/// generated functions as pointers, plus the tables as data.
///
/// Only the macro builds one, so every `Tables` passed the same compile-time
/// checks as the ones `policy` ships ([`crate::TABLES`]).
#[derive(Clone, Copy)]
pub struct Tables {
    origin: &'static str,
    select: fn(Query) -> Algo,
    capacity: fn(Arch, Link, Collective, Algo) -> Capacity,
    table_arch: fn(Arch, Link) -> Option<Arch>,
    platforms: &'static [PlatformInfo],
}

impl Tables {
    /// Called by the code `include_tuned!` generates; not an API. Hidden because
    /// a hand-built value would skip the compile-time checks.
    #[doc(hidden)]
    pub const fn __generated(
        origin: &'static str,
        select: fn(Query) -> Algo,
        capacity: fn(Arch, Link, Collective, Algo) -> Capacity,
        table_arch: fn(Arch, Link) -> Option<Arch>,
        platforms: &'static [PlatformInfo],
    ) -> Tables {
        Tables {
            origin,
            select,
            capacity,
            table_arch,
            platforms,
        }
    }

    /// The generated `select`: the algorithm these tables choose for `q`.
    #[inline]
    pub fn select(&self, q: Query) -> Algo {
        (self.select)(q)
    }

    /// The generated `capacity`: buffer size and alignment of `algo` on
    /// `(arch, link)` according to these tables.
    #[inline]
    pub fn capacity(&self, arch: Arch, link: Link, collective: Collective, algo: Algo) -> Capacity {
        (self.capacity)(arch, link, collective, algo)
    }

    /// The generated `table_arch`: which platform file of these tables answers
    /// `(arch, link)`.
    #[inline]
    pub fn table_arch(&self, arch: Arch, link: Link) -> Option<Arch> {
        (self.table_arch)(arch, link)
    }

    /// The files, as data (the generated `PLATFORMS`).
    pub const fn platforms(&self) -> &'static [PlatformInfo] {
        self.platforms
    }

    /// Where the tables were compiled from: `crate: folder`, e.g.
    /// `colltune-policy: tuned` or `my-engine: tuned`. For logs and errors.
    pub const fn origin(&self) -> &'static str {
        self.origin
    }
}

/// Function pointers print as addresses, which say nothing; the origin and the
/// tables are what tell two table sets apart.
impl fmt::Debug for Tables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tables")
            .field("origin", &self.origin)
            .field("platforms", &self.platforms)
            .finish()
    }
}

/// The tables this process dispatches with. Set once, by [`use_tables`] or by
/// the first [`tables_in_use`] (which settles on the built-in ones): all ranks
/// and all calls of a process must agree, so it never changes afterwards.
static IN_USE: OnceLock<&'static Tables> = OnceLock::new();

/// Makes `tables` the ones this process dispatches with: what
/// [`tables_in_use`] returns, and so what `kernels` selects and sizes its
/// buffers from. Call it once at start-up, before the first communicator is
/// built.
///
/// Calling it again with the same tables is harmless. Any other call after the
/// tables were settled (by an earlier call, or by a dispatcher that already
/// asked [`tables_in_use`]) is a [`TablesInUse`] error: switching tables under
/// running communicators would let ranks disagree on the algorithm of a call.
pub fn use_tables(tables: &'static Tables) -> Result<(), TablesInUse> {
    let settled = IN_USE.get_or_init(|| tables);
    if core::ptr::eq(*settled, tables) {
        Ok(())
    } else {
        Err(TablesInUse {
            in_use: settled.origin,
            refused: tables.origin,
        })
    }
}

/// The tables this process dispatches with: those given to [`use_tables`], or
/// the built-in [`crate::TABLES`] (compiled from `policy`'s own `tuned/`) when
/// nothing was given before the first call. That first call settles the choice.
pub fn tables_in_use() -> &'static Tables {
    IN_USE.get_or_init(|| &crate::TABLES)
}

/// [`use_tables`] was called after other tables were settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TablesInUse {
    in_use: &'static str,
    refused: &'static str,
}

impl TablesInUse {
    /// The origin of the tables the process keeps dispatching with.
    pub fn in_use(&self) -> &'static str {
        self.in_use
    }
}

impl fmt::Display for TablesInUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot dispatch with the tables of `{}`: this process already uses those of `{}`; \
             call policy::use_tables once at start-up, before any communicator is built",
            self.refused, self.in_use
        )
    }
}

impl std::error::Error for TablesInUse {}
