//! Certificates and keys of a test control plane: a CA, the API server's serving certificate,
//! an admin client certificate in group `system:masters`, and the service-account signing key.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::error::{Error, Result};

/// Paths of the PEM files written by [`write_pki`].
#[derive(Debug, Clone)]
pub struct Pki {
    /// CA certificate that signed the serving and client certificates.
    pub ca_cert: PathBuf,
    /// Serving certificate of the API server (127.0.0.1, localhost).
    pub serving_cert: PathBuf,
    /// Key of the serving certificate.
    pub serving_key: PathBuf,
    /// Admin client certificate (CN `bulwark-testenv-admin`, O `system:masters`).
    pub admin_cert: PathBuf,
    /// Key of the admin client certificate.
    pub admin_key: PathBuf,
    /// Private key that signs service-account tokens.
    pub service_account_key: PathBuf,
    /// Public key that verifies service-account tokens.
    pub service_account_pub: PathBuf,
}

/// Generates the certificates and keys and writes them into `dir`.
pub fn write_pki(dir: &Path) -> Result<Pki> {
    let cert_err = |what: &'static str| move |source| Error::Certificate { what, source };

    let ca_key = KeyPair::generate().map_err(cert_err("CA key"))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(cert_err("CA"))?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "bulwark-testenv-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params.self_signed(&ca_key).map_err(cert_err("CA"))?;

    let serving_key = KeyPair::generate().map_err(cert_err("serving key"))?;
    let mut serving_params = CertificateParams::new(vec![
        "localhost".to_owned(),
        "kubernetes".to_owned(),
        "kubernetes.default".to_owned(),
        "kubernetes.default.svc".to_owned(),
    ])
    .map_err(cert_err("serving certificate"))?;
    serving_params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving_params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    serving_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving = serving_params
        .signed_by(&serving_key, &ca, &ca_key)
        .map_err(cert_err("serving certificate"))?;

    let admin_key = KeyPair::generate().map_err(cert_err("admin key"))?;
    let mut admin_params =
        CertificateParams::new(Vec::<String>::new()).map_err(cert_err("admin certificate"))?;
    admin_params
        .distinguished_name
        .push(DnType::CommonName, "bulwark-testenv-admin");
    admin_params
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    admin_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin = admin_params
        .signed_by(&admin_key, &ca, &ca_key)
        .map_err(cert_err("admin certificate"))?;

    let sa_key = KeyPair::generate().map_err(cert_err("service-account key"))?;

    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        admin_cert: dir.join("admin.crt"),
        admin_key: dir.join("admin.key"),
        service_account_key: dir.join("sa.key"),
        service_account_pub: dir.join("sa.pub"),
    };
    write(&pki.ca_cert, &ca.pem())?;
    write(&pki.serving_cert, &serving.pem())?;
    write(&pki.serving_key, &serving_key.serialize_pem())?;
    write(&pki.admin_cert, &admin.pem())?;
    write(&pki.admin_key, &admin_key.serialize_pem())?;
    write(&pki.service_account_key, &sa_key.serialize_pem())?;
    write(&pki.service_account_pub, &sa_key.public_key_pem())?;
    Ok(pki)
}

fn write(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_file_as_pem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = write_pki(dir.path()).expect("pki");
        for (path, label) in [
            (&pki.ca_cert, "CERTIFICATE"),
            (&pki.serving_cert, "CERTIFICATE"),
            (&pki.admin_cert, "CERTIFICATE"),
            (&pki.serving_key, "PRIVATE KEY"),
            (&pki.admin_key, "PRIVATE KEY"),
            (&pki.service_account_key, "PRIVATE KEY"),
            (&pki.service_account_pub, "PUBLIC KEY"),
        ] {
            let text = std::fs::read_to_string(path).expect("read");
            assert!(
                text.starts_with(&format!("-----BEGIN {label}-----")),
                "{}: {text}",
                path.display()
            );
        }
    }
}
