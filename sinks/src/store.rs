//! Building the object store from a URL, classifying its errors, minting unique object keys.

use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;

use crate::local::DurableLocalStore;

use crate::sync::{Arc, AtomicU64, OnceLock, Ordering};

/// Why a store could not be built from its URL.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL's scheme is not one this build supports.
    #[error("unsupported store url {url}: {hint}")]
    UnsupportedScheme {
        /// The URL as given.
        url: String,
        /// What is supported.
        hint: &'static str,
    },
    /// The local directory could not be created, resolved or synced.
    #[error("cannot create store directory {path}")]
    CreateDir {
        /// The directory.
        path: String,
        /// The I/O error.
        source: io::Error,
    },
    /// `object_store` refused the configuration.
    #[error("cannot build store for {url}: {source}")]
    Build {
        /// The URL as given.
        url: String,
        /// The builder's error.
        source: object_store::Error,
    },
}

/// Build the store a URL names.
///
/// - `memory://` : a fresh in-memory store (tests, benchmarks).
/// - `file:///abs/dir` : a local directory, created if missing; object keys live below it. A
///   put returns once the object and its directory chain are synced ([`DurableLocalStore`]).
/// - `s3://bucket[/prefix]` : Amazon S3 or a compatible server, configured from the usual
///   `AWS_*` environment variables; keys live below `prefix`. Only with the `aws` feature.
pub fn store_from_url(url: &str) -> Result<Arc<dyn ObjectStore>, StoreError> {
    if let Some(rest) = url.strip_prefix("memory://") {
        let _ = rest;
        return Ok(Arc::new(InMemory::new()));
    }
    if let Some(dir) = url.strip_prefix("file://") {
        if !dir.starts_with('/') {
            return Err(StoreError::UnsupportedScheme {
                url: url.to_owned(),
                hint: "file urls need an absolute path (file:///dir)",
            });
        }
        let fs = DurableLocalStore::new(std::path::Path::new(dir)).map_err(|source| {
            StoreError::CreateDir {
                path: dir.to_owned(),
                source,
            }
        })?;
        return Ok(Arc::new(fs));
    }
    if let Some(rest) = url.strip_prefix("s3://") {
        return s3(url, rest);
    }
    Err(StoreError::UnsupportedScheme {
        url: url.to_owned(),
        hint: "expected memory://, file:///dir or s3://bucket/prefix",
    })
}

#[cfg(feature = "aws")]
fn s3(url: &str, rest: &str) -> Result<Arc<dyn ObjectStore>, StoreError> {
    use object_store::aws::AmazonS3Builder;
    use object_store::prefix::PrefixStore;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let s3 = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .build()
        .map_err(|source| StoreError::Build {
            url: url.to_owned(),
            source,
        })?;
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        Ok(Arc::new(s3))
    } else {
        Ok(Arc::new(PrefixStore::new(s3, prefix)))
    }
}

#[cfg(not(feature = "aws"))]
fn s3(url: &str, _rest: &str) -> Result<Arc<dyn ObjectStore>, StoreError> {
    Err(StoreError::UnsupportedScheme {
        url: url.to_owned(),
        hint: "s3:// needs the `aws` feature of ourios-sinks",
    })
}

/// Whether a store error may succeed on a later attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Retry later: the same put may succeed (the item is requeued).
    Transient,
    /// Will not succeed without an operator repairing something (for the audit sink: the tenant
    /// becomes terminal).
    Permanent,
}

impl ErrorClass {
    /// The `error.type` label a flush error of this class is counted under.
    pub fn error_type(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Permanent => "permanent",
        }
    }
}

/// Classify an `object_store` error for a put of a fresh, unique key.
///
/// Permanent (retrying cannot help until an operator repairs something):
/// - `PermissionDenied`, `Unauthenticated`: credentials or policy.
/// - `InvalidPath`, `NotSupported`, `NotImplemented`, `UnknownConfigurationKey`: the request or
///   the configuration is wrong.
/// - `Precondition`, `AlreadyExists`, `NotModified`: a conditional request failed on a key this
///   sink mints uniquely, so the store disagrees with the sink's assumptions.
/// - `NotFound` on the put path: the bucket or container is missing.
/// - `Generic` whose source chain holds an `io::Error` of kind `PermissionDenied`,
///   `ReadOnlyFilesystem`, `InvalidInput` or `InvalidFilename` (the local store reports these
///   as `Generic`).
///
/// Transient: everything else — timeouts, connection and I/O errors, HTTP 5xx and throttling
/// (which the HTTP client reports as `Generic` after its own retries), a storage-full disk,
/// a failed blocking task (`JoinError`). An HTTP 4xx that `object_store` does not map to a typed
/// variant also arrives as `Generic` and is therefore treated as transient: it is retried and
/// counted on every attempt rather than risked as a permanent verdict, which would make a tenant
/// terminal.
pub fn classify(error: &object_store::Error) -> ErrorClass {
    use object_store::Error as E;
    match error {
        E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::InvalidPath { .. }
        | E::NotSupported { .. }
        | E::NotImplemented { .. }
        | E::UnknownConfigurationKey { .. }
        | E::Precondition { .. }
        | E::AlreadyExists { .. }
        | E::NotModified { .. }
        | E::NotFound { .. } => ErrorClass::Permanent,
        E::Generic { source, .. } => {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
            while let Some(e) = cause {
                if let Some(io) = e.downcast_ref::<io::Error>() {
                    return match io.kind() {
                        io::ErrorKind::PermissionDenied
                        | io::ErrorKind::ReadOnlyFilesystem
                        | io::ErrorKind::InvalidInput
                        | io::ErrorKind::InvalidFilename => ErrorClass::Permanent,
                        _ => ErrorClass::Transient,
                    };
                }
                cause = e.source();
            }
            ErrorClass::Transient
        }
        _ => ErrorClass::Transient,
    }
}

/// A process-unique suffix for object names: the process id, its start time and a counter, so
/// two puts (a retry after a requeue included) never overwrite each other.
pub(crate) fn unique_name(first: u64) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static INSTANCE: OnceLock<String> = OnceLock::new();
    let instance = INSTANCE.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{:x}{:08x}", nanos, std::process::id())
    });
    // Relaxed: only the uniqueness of the returned value matters; fetch_add is atomic under any
    // ordering and nothing else is published through this counter.
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{first:020}-{instance}-{n:08}.parquet")
}

/// `prefix` (may be empty) followed by `parts`, each percent-encoded as one path segment.
pub(crate) fn object_path<'a>(prefix: &str, parts: impl IntoIterator<Item = &'a str>) -> Path {
    let mut path = Path::from(prefix);
    for part in parts {
        path = path.join(part);
    }
    path
}

/// The future type `#[async_trait]` methods of `ObjectStore` return.
pub(crate) type BoxFut<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// An `ObjectStore` whose `put_opts` is the wrapper's own async method `$put` (same arguments)
/// and, given `get = $get`, whose `get_opts` is `$get`; every other method is passed to
/// `self.inner`: for the wrappers that change only how
/// a put behaves (`DurableLocalStore`, the test `FaultyStore`). The signatures are what
/// `#[async_trait]` expands the trait's declarations to.
macro_rules! object_store_with_put {
    ($put:ident) => {
        $crate::store::object_store_with_put!($put, get = forward_get);
    };
    ($put:ident, get = $get:ident) => {
        fn put_opts<'life0, 'life1, 'async_trait>(
            &'life0 self,
            location: &'life1 object_store::path::Path,
            payload: object_store::PutPayload,
            opts: object_store::PutOptions,
        ) -> $crate::store::BoxFut<'async_trait, object_store::Result<object_store::PutResult>>
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            Self: 'async_trait,
        {
            Box::pin(self.$put(location, payload, opts))
        }

        fn put_multipart_opts<'life0, 'life1, 'async_trait>(
            &'life0 self,
            location: &'life1 object_store::path::Path,
            opts: object_store::PutMultipartOptions,
        ) -> $crate::store::BoxFut<
            'async_trait,
            object_store::Result<Box<dyn object_store::MultipartUpload>>,
        >
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            Self: 'async_trait,
        {
            self.inner.put_multipart_opts(location, opts)
        }

        fn get_opts<'life0, 'life1, 'async_trait>(
            &'life0 self,
            location: &'life1 object_store::path::Path,
            options: object_store::GetOptions,
        ) -> $crate::store::BoxFut<'async_trait, object_store::Result<object_store::GetResult>>
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            Self: 'async_trait,
        {
            $crate::store::object_store_with_put!(@get self, $get, location, options)
        }

        fn get_ranges<'life0, 'life1, 'life2, 'async_trait>(
            &'life0 self,
            location: &'life1 object_store::path::Path,
            ranges: &'life2 [std::ops::Range<u64>],
        ) -> $crate::store::BoxFut<'async_trait, object_store::Result<Vec<bytes::Bytes>>>
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            'life2: 'async_trait,
            Self: 'async_trait,
        {
            self.inner.get_ranges(location, ranges)
        }

        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<
                'static,
                object_store::Result<object_store::path::Path>,
            >,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
            self.inner.delete_stream(locations)
        }

        fn list(
            &self,
            prefix: Option<&object_store::path::Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
            self.inner.list(prefix)
        }

        fn list_with_delimiter<'life0, 'life1, 'async_trait>(
            &'life0 self,
            prefix: Option<&'life1 object_store::path::Path>,
        ) -> $crate::store::BoxFut<'async_trait, object_store::Result<object_store::ListResult>>
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            Self: 'async_trait,
        {
            self.inner.list_with_delimiter(prefix)
        }

        fn copy_opts<'life0, 'life1, 'life2, 'async_trait>(
            &'life0 self,
            from: &'life1 object_store::path::Path,
            to: &'life2 object_store::path::Path,
            options: object_store::CopyOptions,
        ) -> $crate::store::BoxFut<'async_trait, object_store::Result<()>>
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            'life2: 'async_trait,
            Self: 'async_trait,
        {
            self.inner.copy_opts(from, to, options)
        }
    };
    (@get $self:ident, forward_get, $location:ident, $options:ident) => {
        $self.inner.get_opts($location, $options)
    };
    (@get $self:ident, $get:ident, $location:ident, $options:ident) => {
        Box::pin($self.$get($location, $options))
    };
}
pub(crate) use object_store_with_put;
