//! Operating-system errors as the protocols report them, worded here (issue #41): the seam
//! answers with an [`Errno`] (Linux numbering, whatever the host), and a message reads as the
//! native host's always read — glibc's `strerror` text and the number, `Permission denied (os
//! error 13)`, byte for byte what Rust's `std::io::Error` prints on Linux. So a host that runs
//! the protocols from WebAssembly (where the C library's numbering differs) words nothing.

use alloc::string::String;

#[cfg(feature = "std")]
use alloc::string::ToString as _;
use core::fmt;
use proclease_core::effects::Failure;

/// A Linux errno (`EACCES` is 13 on every host: a host whose own numbering differs translates).
///
/// `Display` gives glibc's text and the number (`No such file or directory (os error 2)`);
/// `Debug` gives the symbolic name (`ENOENT`), or `Errno(N)` for a number Linux does not name.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Errno(i32);

impl Errno {
    /// `EPERM`.
    pub const PERM: Errno = Errno(1);
    /// `ENOENT`.
    pub const NOENT: Errno = Errno(2);
    /// `ESRCH`.
    pub const SRCH: Errno = Errno(3);
    /// `EINTR`.
    pub const INTR: Errno = Errno(4);
    /// `EIO`.
    pub const IO: Errno = Errno(5);
    /// `EBADF`.
    pub const BADF: Errno = Errno(9);
    /// `EAGAIN` (`EWOULDBLOCK`).
    pub const AGAIN: Errno = Errno(11);
    /// `ENOMEM`.
    pub const NOMEM: Errno = Errno(12);
    /// `EACCES`.
    pub const ACCESS: Errno = Errno(13);
    /// `EBUSY`.
    pub const BUSY: Errno = Errno(16);
    /// `EEXIST`.
    pub const EXIST: Errno = Errno(17);
    /// `EXDEV`.
    pub const XDEV: Errno = Errno(18);
    /// `ENOTDIR`.
    pub const NOTDIR: Errno = Errno(20);
    /// `EISDIR`.
    pub const ISDIR: Errno = Errno(21);
    /// `EINVAL`.
    pub const INVAL: Errno = Errno(22);
    /// `ENFILE`.
    pub const NFILE: Errno = Errno(23);
    /// `EMFILE`.
    pub const MFILE: Errno = Errno(24);
    /// `EFBIG`.
    pub const FBIG: Errno = Errno(27);
    /// `ENOSPC`.
    pub const NOSPC: Errno = Errno(28);
    /// `EROFS`.
    pub const ROFS: Errno = Errno(30);
    /// `ENAMETOOLONG`.
    pub const NAMETOOLONG: Errno = Errno(36);
    /// `ENOLCK`.
    pub const NOLCK: Errno = Errno(37);
    /// `ENOSYS`.
    pub const NOSYS: Errno = Errno(38);
    /// `ENOTEMPTY`.
    pub const NOTEMPTY: Errno = Errno(39);
    /// `ELOOP`.
    pub const LOOP: Errno = Errno(40);
    /// `EILSEQ`.
    pub const ILSEQ: Errno = Errno(84);
    /// `EOPNOTSUPP` (`ENOTSUP`).
    pub const OPNOTSUPP: Errno = Errno(95);
    /// `EDQUOT`.
    pub const DQUOT: Errno = Errno(122);

    /// The errno numbered `code` (Linux numbering).
    pub const fn from_raw(code: i32) -> Errno {
        Errno(code)
    }

    /// Its number.
    pub const fn raw(self) -> i32 {
        self.0
    }

    /// Its symbolic name (`EROFS`), or `None` for a number Linux does not name.
    pub fn name(self) -> Option<&'static str> {
        self.entry().map(|(name, _)| name).filter(|name| !name.is_empty())
    }

    /// glibc's `strerror` text (`Read-only file system`); `Unknown error N` for a number Linux
    /// does not name, as glibc says.
    pub fn description(self) -> String {
        match self.entry() {
            Some((_, text)) if !text.is_empty() => text.into(),
            _ => alloc::format!("Unknown error {}", self.0),
        }
    }

    /// Its name as it crosses the boundary (`Failure::os`): [`name`](Self::name), or `errno N`
    /// for a number Linux does not name.
    pub fn symbol(self) -> String {
        self.name().map_or_else(|| alloc::format!("errno {}", self.0), String::from)
    }

    fn entry(self) -> Option<(&'static str, &'static str)> {
        let index = usize::try_from(self.0).ok()?;
        TABLE.get(index).copied()
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (os error {})", self.description(), self.0)
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl core::error::Error for Errno {}

/// An I/O error of the protocols: an errno from the seam, or a message of their own (a record
/// that is too long, a directory that is not private). `Display` reads as `std::io::Error` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoError {
    /// A system call failed.
    Os(Errno),
    /// A failure with no errno, and its message.
    Other(String),
}

impl IoError {
    /// A failure with no errno.
    pub fn other(message: impl Into<String>) -> IoError {
        IoError::Other(message.into())
    }

    /// Its errno, if a system call failed.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            IoError::Os(errno) => Some(*errno),
            IoError::Other(_) => None,
        }
    }

    /// Its errno's number, as `std::io::Error::raw_os_error` gives it.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.errno().map(Errno::raw)
    }
}

impl IoError {
    /// This error of `operation` on `path` as it crosses the boundary, with `message` whole: its
    /// kind from the errno (`Failure::os`), or an I/O failure without one.
    pub fn failure(&self, path: &str, operation: &str, message: String) -> Failure {
        match self.errno() {
            Some(errno) => Failure::os(&errno.symbol(), path, operation, message),
            None => Failure { path: Some(path.into()), operation: Some(operation.into()), ..Failure::io(message) },
        }
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoError::Os(errno) => errno.fmt(f),
            IoError::Other(message) => f.write_str(message),
        }
    }
}

impl core::error::Error for IoError {}

impl From<Errno> for IoError {
    fn from(errno: Errno) -> IoError {
        IoError::Os(errno)
    }
}

#[cfg(feature = "std")]
impl From<std::io::Error> for IoError {
    /// Keeps the errno; an error without one keeps its message.
    fn from(error: std::io::Error) -> IoError {
        match error.raw_os_error() {
            Some(code) => IoError::Os(Errno(code)),
            None => IoError::Other(error.to_string()),
        }
    }
}

#[cfg(feature = "std")]
impl From<IoError> for std::io::Error {
    fn from(error: IoError) -> std::io::Error {
        match error {
            IoError::Os(errno) => std::io::Error::from_raw_os_error(errno.0),
            IoError::Other(message) => std::io::Error::other(message),
        }
    }
}

#[cfg(feature = "std")]
impl From<Errno> for std::io::Error {
    fn from(errno: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(errno.0)
    }
}

#[cfg(feature = "rustix")]
impl From<rustix::io::Errno> for Errno {
    fn from(errno: rustix::io::Errno) -> Errno {
        Errno(errno.raw_os_error())
    }
}

#[cfg(feature = "rustix")]
impl From<rustix::io::Errno> for IoError {
    fn from(errno: rustix::io::Errno) -> IoError {
        IoError::Os(errno.into())
    }
}

/// Linux's errno names and glibc's texts, indexed by number (`("", "")`: Linux names none).
const TABLE: [(&str, &str); 134] = [
    ("", "Success"),
    ("EPERM", "Operation not permitted"),
    ("ENOENT", "No such file or directory"),
    ("ESRCH", "No such process"),
    ("EINTR", "Interrupted system call"),
    ("EIO", "Input/output error"),
    ("ENXIO", "No such device or address"),
    ("E2BIG", "Argument list too long"),
    ("ENOEXEC", "Exec format error"),
    ("EBADF", "Bad file descriptor"),
    ("ECHILD", "No child processes"),
    ("EAGAIN", "Resource temporarily unavailable"),
    ("ENOMEM", "Cannot allocate memory"),
    ("EACCES", "Permission denied"),
    ("EFAULT", "Bad address"),
    ("ENOTBLK", "Block device required"),
    ("EBUSY", "Device or resource busy"),
    ("EEXIST", "File exists"),
    ("EXDEV", "Invalid cross-device link"),
    ("ENODEV", "No such device"),
    ("ENOTDIR", "Not a directory"),
    ("EISDIR", "Is a directory"),
    ("EINVAL", "Invalid argument"),
    ("ENFILE", "Too many open files in system"),
    ("EMFILE", "Too many open files"),
    ("ENOTTY", "Inappropriate ioctl for device"),
    ("ETXTBSY", "Text file busy"),
    ("EFBIG", "File too large"),
    ("ENOSPC", "No space left on device"),
    ("ESPIPE", "Illegal seek"),
    ("EROFS", "Read-only file system"),
    ("EMLINK", "Too many links"),
    ("EPIPE", "Broken pipe"),
    ("EDOM", "Numerical argument out of domain"),
    ("ERANGE", "Numerical result out of range"),
    ("EDEADLK", "Resource deadlock avoided"),
    ("ENAMETOOLONG", "File name too long"),
    ("ENOLCK", "No locks available"),
    ("ENOSYS", "Function not implemented"),
    ("ENOTEMPTY", "Directory not empty"),
    ("ELOOP", "Too many levels of symbolic links"),
    ("", ""),
    ("ENOMSG", "No message of desired type"),
    ("EIDRM", "Identifier removed"),
    ("ECHRNG", "Channel number out of range"),
    ("EL2NSYNC", "Level 2 not synchronized"),
    ("EL3HLT", "Level 3 halted"),
    ("EL3RST", "Level 3 reset"),
    ("ELNRNG", "Link number out of range"),
    ("EUNATCH", "Protocol driver not attached"),
    ("ENOCSI", "No CSI structure available"),
    ("EL2HLT", "Level 2 halted"),
    ("EBADE", "Invalid exchange"),
    ("EBADR", "Invalid request descriptor"),
    ("EXFULL", "Exchange full"),
    ("ENOANO", "No anode"),
    ("EBADRQC", "Invalid request code"),
    ("EBADSLT", "Invalid slot"),
    ("", ""),
    ("EBFONT", "Bad font file format"),
    ("ENOSTR", "Device not a stream"),
    ("ENODATA", "No data available"),
    ("ETIME", "Timer expired"),
    ("ENOSR", "Out of streams resources"),
    ("ENONET", "Machine is not on the network"),
    ("ENOPKG", "Package not installed"),
    ("EREMOTE", "Object is remote"),
    ("ENOLINK", "Link has been severed"),
    ("EADV", "Advertise error"),
    ("ESRMNT", "Srmount error"),
    ("ECOMM", "Communication error on send"),
    ("EPROTO", "Protocol error"),
    ("EMULTIHOP", "Multihop attempted"),
    ("EDOTDOT", "RFS specific error"),
    ("EBADMSG", "Bad message"),
    ("EOVERFLOW", "Value too large for defined data type"),
    ("ENOTUNIQ", "Name not unique on network"),
    ("EBADFD", "File descriptor in bad state"),
    ("EREMCHG", "Remote address changed"),
    ("ELIBACC", "Can not access a needed shared library"),
    ("ELIBBAD", "Accessing a corrupted shared library"),
    ("ELIBSCN", ".lib section in a.out corrupted"),
    ("ELIBMAX", "Attempting to link in too many shared libraries"),
    ("ELIBEXEC", "Cannot exec a shared library directly"),
    ("EILSEQ", "Invalid or incomplete multibyte or wide character"),
    ("ERESTART", "Interrupted system call should be restarted"),
    ("ESTRPIPE", "Streams pipe error"),
    ("EUSERS", "Too many users"),
    ("ENOTSOCK", "Socket operation on non-socket"),
    ("EDESTADDRREQ", "Destination address required"),
    ("EMSGSIZE", "Message too long"),
    ("EPROTOTYPE", "Protocol wrong type for socket"),
    ("ENOPROTOOPT", "Protocol not available"),
    ("EPROTONOSUPPORT", "Protocol not supported"),
    ("ESOCKTNOSUPPORT", "Socket type not supported"),
    ("EOPNOTSUPP", "Operation not supported"),
    ("EPFNOSUPPORT", "Protocol family not supported"),
    ("EAFNOSUPPORT", "Address family not supported by protocol"),
    ("EADDRINUSE", "Address already in use"),
    ("EADDRNOTAVAIL", "Cannot assign requested address"),
    ("ENETDOWN", "Network is down"),
    ("ENETUNREACH", "Network is unreachable"),
    ("ENETRESET", "Network dropped connection on reset"),
    ("ECONNABORTED", "Software caused connection abort"),
    ("ECONNRESET", "Connection reset by peer"),
    ("ENOBUFS", "No buffer space available"),
    ("EISCONN", "Transport endpoint is already connected"),
    ("ENOTCONN", "Transport endpoint is not connected"),
    ("ESHUTDOWN", "Cannot send after transport endpoint shutdown"),
    ("ETOOMANYREFS", "Too many references: cannot splice"),
    ("ETIMEDOUT", "Connection timed out"),
    ("ECONNREFUSED", "Connection refused"),
    ("EHOSTDOWN", "Host is down"),
    ("EHOSTUNREACH", "No route to host"),
    ("EALREADY", "Operation already in progress"),
    ("EINPROGRESS", "Operation now in progress"),
    ("ESTALE", "Stale file handle"),
    ("EUCLEAN", "Structure needs cleaning"),
    ("ENOTNAM", "Not a XENIX named type file"),
    ("ENAVAIL", "No XENIX semaphores available"),
    ("EISNAM", "Is a named type file"),
    ("EREMOTEIO", "Remote I/O error"),
    ("EDQUOT", "Disk quota exceeded"),
    ("ENOMEDIUM", "No medium found"),
    ("EMEDIUMTYPE", "Wrong medium type"),
    ("ECANCELED", "Operation canceled"),
    ("ENOKEY", "Required key not available"),
    ("EKEYEXPIRED", "Key has expired"),
    ("EKEYREVOKED", "Key has been revoked"),
    ("EKEYREJECTED", "Key was rejected by service"),
    ("EOWNERDEAD", "Owner died"),
    ("ENOTRECOVERABLE", "State not recoverable"),
    ("ERFKILL", "Operation not possible due to RF-kill"),
    ("EHWPOISON", "Memory page has hardware error"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;

    /// The texts are glibc's, byte for byte, as Rust's own `std::io::Error` prints them on this
    /// machine, for every number (named or not).
    #[test]
    fn every_errno_reads_as_std_prints_it() {
        for code in 0..=140 {
            assert_eq!(Errno(code).to_string(), std::io::Error::from_raw_os_error(code).to_string(), "errno {code}");
            assert_eq!(IoError::Os(Errno(code)).to_string(), std::io::Error::from_raw_os_error(code).to_string());
        }
    }

    /// The names are the kernel's, as rustix numbers them.
    #[test]
    fn the_named_constants_are_linux_numbers() {
        let pairs = [
            (Errno::NOENT, rustix::io::Errno::NOENT),
            (Errno::ACCESS, rustix::io::Errno::ACCESS),
            (Errno::LOOP, rustix::io::Errno::LOOP),
            (Errno::NOTEMPTY, rustix::io::Errno::NOTEMPTY),
            (Errno::ILSEQ, rustix::io::Errno::ILSEQ),
            (Errno::OPNOTSUPP, rustix::io::Errno::OPNOTSUPP),
            (Errno::DQUOT, rustix::io::Errno::DQUOT),
            (Errno::NOLCK, rustix::io::Errno::NOLCK),
        ];
        for (ours, kernel) in pairs {
            assert_eq!(ours.raw(), kernel.raw_os_error(), "{ours:?}");
        }
        assert_eq!(Errno::ROFS.name(), Some("EROFS"));
        assert_eq!(format!("{:?}", Errno::from_raw(41)), "Errno(41)");
    }

    #[cfg(feature = "std")]
    #[test]
    fn an_error_without_an_errno_keeps_its_message() {
        let error = IoError::from(std::io::Error::other("journal record too long"));
        assert_eq!(error, IoError::Other("journal record too long".into()));
        assert_eq!(std::io::Error::from(error).to_string(), "journal record too long");
        assert_eq!(std::io::Error::from(IoError::Os(Errno::NOSPC)).raw_os_error(), Some(28));
    }
}
