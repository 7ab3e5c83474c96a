//! The mysqld exporter's option file: `bulwark-agent init` writes the `[client]` section (the
//! metrics account and its password, read from the mounted Secret file) into an in-memory
//! volume that only the exporter mounts, so the password never sits in an environment.

use std::path::{Path, PathBuf};

use bulwark_engine::outfile::OutfileError;

/// Where the exporter finds its option file, and the password it carries.
#[derive(Debug, Clone)]
pub struct ExporterConfig {
    /// The option file to write (`--config.my-cnf` of the exporter).
    pub config_file: PathBuf,
    /// The metrics account's password, as mounted from its Secret.
    pub password_file: PathBuf,
    /// The metrics account.
    pub user: String,
    /// The server's port on the pod's loopback address.
    pub port: u16,
}

/// Errors of writing the exporter's option file.
#[derive(Debug, thiserror::Error)]
pub enum ExporterConfigError {
    #[error("failed to read the metrics password file {path}")]
    ReadPassword {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the metrics password cannot be written to the exporter's option file: {0}")]
    Unrepresentable(&'static str),
    #[error("failed to write the exporter's option file")]
    Write(#[from] OutfileError),
}

/// The option file's text. Values are quoted for the INI reader both exporter generations use
/// (go-ini): `"…"`, or `"""…"""` when the password holds a double quote; a password that
/// neither can hold is refused rather than cut.
pub fn client_section(
    user: &str,
    password: &str,
    port: u16,
) -> Result<String, ExporterConfigError> {
    if password.contains(['\n', '\r']) {
        return Err(ExporterConfigError::Unrepresentable(
            "it contains a line break",
        ));
    }
    let quoted = if !password.contains('"') {
        format!("\"{password}\"")
    } else if !password.contains("\"\"\"") && !password.ends_with('"') {
        format!("\"\"\"{password}\"\"\"")
    } else {
        return Err(ExporterConfigError::Unrepresentable(
            "it contains three double quotes in a row, or ends with one",
        ));
    };
    Ok(format!(
        "# Written by `bulwark-agent init` at every start of the pod: do not edit.\n\
         [client]\nuser = {user}\npassword = {quoted}\nhost = 127.0.0.1\nport = {port}\n"
    ))
}

/// Reads the password and writes the option file (mode 0400, atomically).
pub fn write(cfg: &ExporterConfig) -> Result<(), ExporterConfigError> {
    let password = read_password(&cfg.password_file)?;
    let text = client_section(&cfg.user, &password, cfg.port)?;
    crate::run::files::replace(&cfg.config_file, text.as_bytes(), 0o400)?;
    Ok(())
}

fn read_password(path: &Path) -> Result<zeroize::Zeroizing<String>, ExporterConfigError> {
    let read_error = |source| ExporterConfigError::ReadPassword {
        path: path.display().to_string(),
        source,
    };
    // A missing file is an error here: the exporter cannot log in without it.
    crate::run::files::read_secret(path)
        .map_err(read_error)?
        .ok_or_else(|| read_error(std::io::ErrorKind::NotFound.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_quoted_or_refused() {
        // (password, the value line, or None when refused)
        let cases = [
            ("s3cret", Some("password = \"s3cret\"")),
            ("a#b;c d", Some("password = \"a#b;c d\"")),
            (
                "say \"hi\" now",
                Some("password = \"\"\"say \"hi\" now\"\"\""),
            ),
            ("back\\slash", Some("password = \"back\\slash\"")),
            ("ends with \"", None),
            ("three \"\"\" quotes", None),
            ("two\nlines", None),
        ];
        for (password, want) in cases {
            let got = client_section("bulwark_exporter", password, 3306);
            match want {
                Some(line) => {
                    let text = got.unwrap();
                    assert!(text.lines().any(|l| l == line), "{password:?}: {text}");
                    assert!(
                        text.contains("[client]\nuser = bulwark_exporter\n"),
                        "{text}"
                    );
                    assert!(text.ends_with("host = 127.0.0.1\nport = 3306\n"), "{text}");
                }
                None => {
                    let err = got.unwrap_err().to_string();
                    assert!(!err.contains(password), "the password never appears: {err}");
                }
            }
        }
    }

    #[test]
    fn the_file_is_written_from_the_secret_file() {
        let dir = tempfile::tempdir().unwrap();
        let password_file = dir.path().join("metrics");
        std::fs::write(&password_file, "pw-from-secret\n").unwrap();
        let cfg = ExporterConfig {
            config_file: dir.path().join("exporter/my.cnf"),
            password_file,
            user: "bulwark_exporter".into(),
            port: 3306,
        };
        std::fs::create_dir(dir.path().join("exporter")).unwrap();
        write(&cfg).unwrap();
        let text = std::fs::read_to_string(&cfg.config_file).unwrap();
        assert!(text.contains("password = \"pw-from-secret\"\n"), "{text}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&cfg.config_file)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o400);
    }
}
