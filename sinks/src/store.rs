//! Building the object store from a URL, classifying its errors, minting unique object keys.

use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, ObjectStoreScheme, PutMode, PutOptions};

use crate::local::DurableLocalStore;
use crate::metrics;

use crate::sync::{Arc, AtomicU64, OnceLock, Ordering};

/// Why a store could not be built from its URL. Each message names the URL; the cause, where
/// there is one, is the error's `source`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The text does not parse as a URL.
    #[error("store url {url:?} is not a URL")]
    NotAUrl {
        /// The URL as given.
        url: String,
        /// The parser's error.
        source: url::ParseError,
    },
    /// The URL's scheme is not one this build supports, or its form is not usable.
    #[error("unsupported store url {url}: {hint}")]
    UnsupportedScheme {
        /// The URL as given.
        url: String,
        /// What is supported.
        hint: &'static str,
    },
    /// A query option the store does not know (options are `object_store`'s configuration
    /// keys, such as `endpoint` or `region` for S3).
    #[error("store url {url}: unknown option `{key}`")]
    UnknownOption {
        /// The URL as given.
        url: String,
        /// The option's name.
        key: String,
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
    #[error("cannot build the store for {url}")]
    Build {
        /// The URL as given.
        url: String,
        /// The builder's error.
        source: object_store::Error,
    },
}

/// Build the store a URL names. The URL is read by `object_store` (`ObjectStoreScheme` and the
/// builders' own URL parsing); its query string sets the store's options by their
/// `object_store` configuration keys.
///
/// - `memory://` : a fresh in-memory store (tests, benchmarks).
/// - `file:///abs/dir` : a local directory, created if missing; object keys live below it. A
///   put returns once the object and its directory chain are synced ([`DurableLocalStore`]).
/// - `s3://bucket[/prefix][?option=value&...]` : Amazon S3 or a compatible server, configured
///   from the usual `AWS_*` environment variables, then the URL's options (`endpoint`,
///   `region`, `allow_http`, ...); keys live below `prefix`. With the `aws` feature.
/// - `gs://bucket[/prefix]` (`GOOGLE_*`, feature `gcp`) and `az://container[/prefix]` or the
///   Azure https forms (`AZURE_*`, feature `azure`), the same way.
///
/// A scheme whose feature is off is refused naming the feature; plain HTTP stores are refused.
pub fn store_from_url(url: &str) -> Result<Arc<dyn ObjectStore>, StoreError> {
    let parsed = url::Url::parse(url).map_err(|source| StoreError::NotAUrl {
        url: url.to_owned(),
        source,
    })?;
    let unsupported = |hint| StoreError::UnsupportedScheme {
        url: url.to_owned(),
        hint,
    };
    let (scheme, prefix) = ObjectStoreScheme::parse(&parsed)
        .map_err(|_| unsupported("expected memory://, file:///dir or s3://bucket/prefix"))?;
    let options: Vec<(String, String)> = parsed
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    match scheme {
        ObjectStoreScheme::Memory | ObjectStoreScheme::Local if !options.is_empty() => {
            Err(StoreError::UnknownOption {
                url: url.to_owned(),
                key: options[0].0.clone(),
            })
        }
        ObjectStoreScheme::Memory => Ok(Arc::new(InMemory::new())),
        ObjectStoreScheme::Local => {
            let dir = parsed
                .to_file_path()
                .map_err(|()| unsupported("file urls need an absolute path (file:///dir)"))?;
            let fs = DurableLocalStore::new(&dir).map_err(|source| StoreError::CreateDir {
                path: dir.display().to_string(),
                source,
            })?;
            Ok(Arc::new(fs))
        }
        ObjectStoreScheme::Http => Err(unsupported(
            "plain http(s) object stores are not supported; use s3://, gs:// or az://",
        )),
        scheme => {
            let mut base = parsed.clone();
            base.set_query(None);
            cloud(scheme, url, &base, &prefix, options)
        }
    }
}

/// A cloud store from its `object_store` builder: the environment first (`from_env`), then
/// the URL (`with_url`), then each query option by the builder's configuration key (an unknown
/// key is refused by name), wrapped below the URL's path as a prefix.
#[cfg(any(feature = "aws", feature = "gcp", feature = "azure"))]
macro_rules! cloud_store {
    ($builder:ty, $key:ty, $url:expr, $base:expr, $prefix:expr, $options:expr) => {{
        let mut builder = <$builder>::from_env().with_url($base.as_str());
        for (key, value) in $options {
            let Ok(config) = key.to_ascii_lowercase().parse::<$key>() else {
                return Err(StoreError::UnknownOption {
                    url: $url.to_owned(),
                    key,
                });
            };
            builder = builder.with_config(config, value);
        }
        let store = builder.build().map_err(|source| StoreError::Build {
            url: $url.to_owned(),
            source,
        })?;
        let store: Arc<dyn ObjectStore> = if $prefix.as_ref().is_empty() {
            Arc::new(store)
        } else {
            Arc::new(object_store::prefix::PrefixStore::new(
                store,
                $prefix.clone(),
            ))
        };
        Ok(store)
    }};
}

/// A cloud scheme's store, or a refusal naming the feature this build lacks.
fn cloud(
    scheme: ObjectStoreScheme,
    url: &str,
    base: &url::Url,
    prefix: &Path,
    options: Vec<(String, String)>,
) -> Result<Arc<dyn ObjectStore>, StoreError> {
    let _ = (base, prefix, &options);
    let missing = |hint| {
        Err(StoreError::UnsupportedScheme {
            url: url.to_owned(),
            hint,
        })
    };
    match scheme {
        #[cfg(feature = "aws")]
        ObjectStoreScheme::AmazonS3 => cloud_store!(
            object_store::aws::AmazonS3Builder,
            object_store::aws::AmazonS3ConfigKey,
            url,
            base,
            prefix,
            options
        ),
        #[cfg(feature = "gcp")]
        ObjectStoreScheme::GoogleCloudStorage => cloud_store!(
            object_store::gcp::GoogleCloudStorageBuilder,
            object_store::gcp::GoogleConfigKey,
            url,
            base,
            prefix,
            options
        ),
        #[cfg(feature = "azure")]
        ObjectStoreScheme::MicrosoftAzure => cloud_store!(
            object_store::azure::MicrosoftAzureBuilder,
            object_store::azure::AzureConfigKey,
            url,
            base,
            prefix,
            options
        ),
        #[cfg(not(feature = "aws"))]
        ObjectStoreScheme::AmazonS3 => missing("s3:// needs the `aws` feature of ourios-sinks"),
        #[cfg(not(feature = "gcp"))]
        ObjectStoreScheme::GoogleCloudStorage => {
            missing("gs:// needs the `gcp` feature of ourios-sinks")
        }
        #[cfg(not(feature = "azure"))]
        ObjectStoreScheme::MicrosoftAzure => {
            missing("az:// (and the Azure https forms) need the `azure` feature of ourios-sinks")
        }
        _ => missing("expected memory://, file:///dir, s3://, gs:// or az:// URLs"),
    }
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

/// How a put that succeeded ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Put {
    /// This call stored the object.
    Stored,
    /// A create-only put found the key taken and the store confirms the object: an earlier
    /// attempt at the same unit stored it.
    AlreadyThere,
}

/// The one put both sinks make: `bytes` at `path`, create-only when `create_only` (then an
/// `AlreadyExists` counts as [`Put::AlreadyThere`] once a `head` confirms the object: on S3 a
/// conflict can mean a put still in progress, and the local store synced it before
/// answering). Counts a stored put and its bytes, or the failure by class, under `consumer`.
pub(crate) async fn put(
    store: &dyn ObjectStore,
    path: &Path,
    bytes: Vec<u8>,
    create_only: bool,
    consumer: &'static str,
) -> Result<Put, (ErrorClass, object_store::Error)> {
    let len = bytes.len() as u64;
    let opts = PutOptions {
        mode: if create_only {
            PutMode::Create
        } else {
            PutMode::Overwrite
        },
        ..PutOptions::default()
    };
    let done = match store.put_opts(path, bytes.into(), opts).await {
        Ok(_) => Ok(Put::Stored),
        Err(object_store::Error::AlreadyExists { .. }) if create_only => {
            store.head(path).await.map(|_| Put::AlreadyThere)
        }
        Err(e) => Err(e),
    };
    match done {
        Ok(put) => {
            if put == Put::Stored {
                ::metrics::counter!(metrics::SINK_PUTS, "consumer" => consumer).increment(1);
                ::metrics::counter!(metrics::SINK_PUT_BYTES, "consumer" => consumer).increment(len);
            }
            Ok(put)
        }
        Err(e) => {
            let class = classify(&e);
            ::metrics::counter!(metrics::FLUSH_ERRORS, "error.type" => class.error_type(), "consumer" => consumer)
                .increment(1);
            Err((class, e))
        }
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
