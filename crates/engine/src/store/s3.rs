//! S3 and S3-compatible repositories through `object_store`: streaming multipart uploads with
//! several parts in flight, retries with backoff, request timeouts, and abort on failure.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, PutPayload, RetryConfig, WriteMultipart,
};

use super::{ObjectInfo, ObjectWriter, Store, StoreError};

/// Connection settings beyond the URL; credentials come from the standard AWS environment.
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    /// Endpoint URL for S3-compatible services, e.g. `http://127.0.0.1:9000`.
    pub endpoint: Option<String>,
    /// Region; defaults to `AWS_REGION`/`AWS_DEFAULT_REGION`, else `us-east-1`.
    pub region: Option<String>,
    /// Path-style requests (`endpoint/bucket/key`), needed by most S3-compatible servers.
    pub path_style: bool,
    /// Multipart part size in bytes; 0 picks one from the segment cap.
    pub part_size: usize,
    /// Parts uploaded concurrently per object.
    pub parts_in_flight: usize,
    /// Per-request timeout.
    pub request_timeout: Option<Duration>,
    /// Retries of one request before giving up.
    pub max_retries: Option<usize>,
    /// A directory of credential files named like the variables (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, optionally `AWS_SESSION_TOKEN`), e.g. a mounted Kubernetes
    /// Secret; when given, it wins over the environment.
    pub credentials_dir: Option<std::path::PathBuf>,
}

/// A repository in a bucket, under a key prefix.
#[derive(Debug)]
pub struct S3Store {
    store: Arc<AmazonS3>,
    bucket: String,
    prefix: String,
    part_size: usize,
    parts_in_flight: usize,
}

fn classify(action: &'static str, key: &str, source: object_store::Error) -> StoreError {
    match source {
        object_store::Error::NotFound { .. } => StoreError::NotFound {
            key: key.to_string(),
        },
        source => StoreError::Remote {
            action,
            key: key.to_string(),
            source: Box::new(source),
        },
    }
}

/// Attempts of a listing whose response body broke.
const LIST_ATTEMPTS: u32 = 4;

/// Whether `e` is a response body that failed after the request (and object_store's retries of
/// it) succeeded. object_store resumes broken GET bodies itself but not listing bodies; every
/// other failure it has already retried, so retrying it again would only multiply the wait.
fn is_unretried_body_error(e: &object_store::Error) -> bool {
    let object_store::Error::Generic { source, .. } = e else {
        return false;
    };
    source
        .source()
        .is_some_and(|s| s.is::<object_store::client::HttpError>())
}

async fn retry_list_body<T, F, Fut>(mut op: F) -> Result<T, object_store::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, object_store::Error>>,
{
    let mut delay = Duration::from_millis(200);
    let mut attempt = 1;
    loop {
        match op().await {
            Err(e) if attempt < LIST_ATTEMPTS && is_unretried_body_error(&e) => {
                tracing::warn!(attempt, error = %crate::chain::chain(&e), "retrying S3 listing");
                tokio::time::sleep(delay).await;
                delay *= 4;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Credentials from a directory of files named like the variables. The error names the file,
/// never a value.
pub fn credentials_from_dir(
    dir: &std::path::Path,
) -> Result<(String, String, Option<String>), String> {
    let read = |name: &str, required: bool| -> Result<Option<String>, String> {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(v) => {
                let v = v.trim_end_matches(['\n', '\r']).to_owned();
                if v.is_empty() && required {
                    Err(format!("credentials file {} is empty", path.display()))
                } else {
                    Ok((!v.is_empty()).then_some(v))
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => Ok(None),
            Err(e) => Err(format!(
                "failed to read credentials file {}: {e}",
                path.display()
            )),
        }
    };
    let id = read("AWS_ACCESS_KEY_ID", true)?.unwrap_or_default();
    let secret = read("AWS_SECRET_ACCESS_KEY", true)?.unwrap_or_default();
    let token = read("AWS_SESSION_TOKEN", false)?;
    Ok((id, secret, token))
}

/// Credentials from the shared credentials file, used when the environment names none, so
/// `~/.aws/credentials` profiles work as with the AWS CLI.
fn shared_credentials() -> Option<(String, String, Option<String>)> {
    let path = std::env::var_os("AWS_SHARED_CREDENTIALS_FILE")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".aws/credentials"))
        })?;
    let text = std::fs::read_to_string(path).ok()?;
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    parse_credentials_file(&text, &profile)
}

fn parse_credentials_file(text: &str, profile: &str) -> Option<(String, String, Option<String>)> {
    let (mut in_profile, mut id, mut secret, mut token) = (false, None, None, None);
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') && line.ends_with(']') {
            in_profile = line[1..line.len() - 1].trim() == profile;
        } else if in_profile {
            if let Some((k, v)) = line.split_once('=') {
                let v = v.trim().to_string();
                match k.trim() {
                    "aws_access_key_id" => id = Some(v),
                    "aws_secret_access_key" => secret = Some(v),
                    "aws_session_token" => token = Some(v),
                    _ => {}
                }
            }
        }
    }
    Some((id?, secret?, token))
}

impl S3Store {
    /// Builds a client for `bucket`; nothing is contacted until the first request.
    pub fn new(bucket: &str, prefix: &str, opts: &S3Options) -> Result<Self, StoreError> {
        let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(dir) = &opts.credentials_dir {
            let (id, secret, token) =
                credentials_from_dir(dir).map_err(|reason| StoreError::Open {
                    url: format!("s3://{bucket}/{prefix}"),
                    reason,
                })?;
            b = b.with_access_key_id(id).with_secret_access_key(secret);
            if let Some(t) = token {
                b = b.with_token(t);
            }
        } else if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
            if let Some((id, secret, token)) = shared_credentials() {
                b = b.with_access_key_id(id).with_secret_access_key(secret);
                if let Some(t) = token {
                    b = b.with_token(t);
                }
            }
        }
        let region = opts
            .region
            .clone()
            .or_else(|| std::env::var("AWS_REGION").ok())
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
            .unwrap_or_else(|| "us-east-1".into());
        b = b.with_region(region);
        // Client options replace the builder's, so HTTP permission is decided here in one place.
        let mut client = ClientOptions::new();
        if let Some(endpoint) = &opts.endpoint {
            b = b.with_endpoint(endpoint);
            client = client.with_allow_http(endpoint.starts_with("http://"));
        } else if std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
            client = client.with_allow_http(true);
        }
        b = b.with_virtual_hosted_style_request(!opts.path_style);
        let client = client
            .with_timeout(opts.request_timeout.unwrap_or(Duration::from_secs(120)))
            .with_connect_timeout(Duration::from_secs(10));
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(15),
                base: 2.0,
            },
            max_retries: opts.max_retries.unwrap_or(10),
            retry_timeout: Duration::from_secs(180),
        };
        let store = b
            .with_client_options(client)
            .with_retry(retry)
            .build()
            .map_err(|e| StoreError::Open {
                url: format!("s3://{bucket}/{prefix}"),
                reason: e.to_string(),
            })?;
        let prefix = prefix.trim_matches('/');
        Ok(Self {
            store: Arc::new(store),
            bucket: bucket.to_string(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
            part_size: if opts.part_size == 0 {
                8 << 20
            } else {
                opts.part_size.max(5 << 20)
            },
            parts_in_flight: opts.parts_in_flight.max(1),
        })
    }

    fn location(&self, key: &str) -> ObjectPath {
        ObjectPath::from(format!("{}{key}", self.prefix))
    }
}

#[async_trait]
impl Store for S3Store {
    fn describe(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<(), StoreError> {
        self.store
            .put(&self.location(key), PutPayload::from_bytes(data))
            .await
            .map(|_| ())
            .map_err(|e| classify("upload", key, e))
    }

    async fn put_new(&self, key: &str, data: Bytes) -> Result<bool, StoreError> {
        // `If-None-Match: *`: AWS S3 and most S3-compatible servers refuse the upload with 412
        // when the object exists.
        let opts = object_store::PutOptions::from(object_store::PutMode::Create);
        let data_again = data.clone();
        match self
            .store
            .put_opts(&self.location(key), PutPayload::from_bytes(data), opts)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            // Conditional puts turned off (`AWS_CONDITIONAL_PUT=disabled`): a plain put, so two
            // writers starting together may each create it; each manifest is signed for the
            // key check as it is when it is written, which keeps what either commits readable.
            Err(object_store::Error::NotImplemented) => {
                tracing::warn!(key, "the S3 store does not create objects only if absent; writing the key check unconditionally");
                self.put(key, data_again).await.map(|()| true)
            }
            Err(e) => Err(classify("create", key, e)),
        }
    }

    async fn create(&self, key: &str) -> Result<Box<dyn ObjectWriter>, StoreError> {
        let upload = self
            .store
            .put_multipart(&self.location(key))
            .await
            .map_err(|e| classify("start multipart upload of", key, e))?;
        Ok(Box::new(S3Writer {
            upload: WriteMultipart::new_with_chunk_size(upload, self.part_size),
            parts_in_flight: self.parts_in_flight,
            key: key.to_string(),
            store: self.store.clone(),
            location: self.location(key),
            written: 0,
        }))
    }

    async fn get(&self, key: &str) -> Result<Bytes, StoreError> {
        let location = self.location(key);
        let result = self
            .store
            .get(&location)
            .await
            .map_err(|e| classify("download", key, e))?;
        result
            .bytes()
            .await
            .map_err(|e| classify("download", key, e))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        let want = range.end - range.start;
        let location = self.location(key);
        let bytes = self
            .store
            .get_range(&location, range.clone())
            .await
            .map_err(|e| classify("download", key, e))?;
        if bytes.len() as u64 != want {
            return Err(StoreError::ShortRead {
                key: key.into(),
                start: range.start,
                end: range.end,
                got: bytes.len() as u64,
            });
        }
        Ok(bytes)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, StoreError> {
        let full = format!("{}{prefix}", self.prefix);
        // object_store lists by path segments; list the enclosing directory and filter.
        let dir = full.rfind('/').map(|i| ObjectPath::from(&full[..i]));
        let metas: Vec<_> = retry_list_body(|| self.store.list(dir.as_ref()).try_collect())
            .await
            .map_err(|e| classify("list", prefix, e))?;
        let mut out: Vec<ObjectInfo> = metas
            .into_iter()
            .filter_map(|m| {
                let key = m.location.as_ref().strip_prefix(&self.prefix)?.to_string();
                key.starts_with(prefix).then_some(ObjectInfo {
                    key,
                    size: m.size,
                    last_modified: m.last_modified,
                })
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        match self.store.delete(&self.location(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(classify("delete", key, e)),
        }
    }
}

struct S3Writer {
    upload: WriteMultipart,
    parts_in_flight: usize,
    key: String,
    store: Arc<AmazonS3>,
    location: ObjectPath,
    written: u64,
}

#[async_trait]
impl ObjectWriter for S3Writer {
    async fn write(&mut self, data: Bytes) -> Result<(), StoreError> {
        self.upload
            .wait_for_capacity(self.parts_in_flight)
            .await
            .map_err(|e| classify("upload part of", &self.key, e))?;
        self.written += data.len() as u64;
        self.upload.put(data);
        Ok(())
    }

    async fn finish(self: Box<Self>) -> Result<(), StoreError> {
        let S3Writer {
            upload,
            key,
            store,
            location,
            written,
            ..
        } = *self;
        match upload.finish().await {
            Ok(_) => Ok(()),
            // When the response to a completion is lost, the retry finds the upload already
            // gone (NoSuchUpload). The object then exists with exactly the bytes written.
            Err(e @ object_store::Error::NotFound { .. }) => match store.head(&location).await {
                Ok(meta) if meta.size == written => {
                    tracing::info!(key = %key, "multipart upload was completed by an earlier attempt");
                    Ok(())
                }
                _ => Err(classify("complete multipart upload of", &key, e)),
            },
            Err(e) => Err(classify("complete multipart upload of", &key, e)),
        }
    }

    async fn abort(self: Box<Self>) {
        let key = self.key;
        if let Err(e) = self.upload.abort().await {
            tracing::warn!(key = %key, error = %crate::chain::chain(&e), "failed to abort multipart upload");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{credentials_from_dir, parse_credentials_file};

    #[test]
    fn credentials_come_from_a_directory_of_files() {
        let dir = tempfile::tempdir().unwrap();
        let put = |name: &str, v: &str| std::fs::write(dir.path().join(name), v).unwrap();
        let err = credentials_from_dir(dir.path()).unwrap_err();
        assert!(err.contains("AWS_ACCESS_KEY_ID"), "{err}");
        put("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE\n");
        put("AWS_SECRET_ACCESS_KEY", "");
        let err = credentials_from_dir(dir.path()).unwrap_err();
        assert!(err.contains("AWS_SECRET_ACCESS_KEY is empty"), "{err}");
        put("AWS_SECRET_ACCESS_KEY", "wJalr-secret");
        assert_eq!(
            credentials_from_dir(dir.path()).unwrap(),
            ("AKIDEXAMPLE".into(), "wJalr-secret".into(), None)
        );
        put("AWS_SESSION_TOKEN", "tok\r\n");
        assert_eq!(
            credentials_from_dir(dir.path()).unwrap().2.as_deref(),
            Some("tok")
        );
    }

    #[test]
    fn shared_credentials_pick_the_named_profile() {
        let text = "[default]\naws_access_key_id = A\naws_secret_access_key = B\n\n[ci]\naws_access_key_id=C\naws_secret_access_key=D\naws_session_token=E\n";
        assert_eq!(
            parse_credentials_file(text, "default"),
            Some(("A".into(), "B".into(), None))
        );
        assert_eq!(
            parse_credentials_file(text, "ci"),
            Some(("C".into(), "D".into(), Some("E".into())))
        );
        assert_eq!(parse_credentials_file(text, "missing"), None);
    }
}
