//! The system-call-thin seam the protocols that keep data safe are written against (issue #41):
//! the traits ([`Fs`], [`Kernel`]) and the file-level steps ([`files`]) live, with the protocols,
//! in `proclease-protocols`; this module is their native implementation, [`NativeFs`] over
//! rustix descriptors and [`Kernel`] over `/proc` (`ProcessIdentity`).

pub use proclease_protocols::files;
pub use proclease_protocols::seam::*;

mod native;

pub use native::NativeFs;
