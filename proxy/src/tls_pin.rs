//! TLS key pinning for the upstream client: the server's certificate must verify as usual (the
//! platform verifier reqwest itself uses, plus any extra roots) *and* the SHA-256 of its leaf
//! certificate's DER SubjectPublicKeyInfo must be one of the preregistered pins. Both are decided
//! inside the handshake, so a server that fails either never receives a request, and with it
//! never the upstream key.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest as _, Sha256};
use std::sync::Arc;

/// The SHA-256 of a DER certificate's SubjectPublicKeyInfo (with its outer `SEQUENCE`), the form
/// `openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256` prints.
pub fn spki_sha256(cert_der: &[u8]) -> Result<[u8; 32], String> {
    let der = CertificateDer::from(cert_der);
    let cert = webpki::EndEntityCert::try_from(&der)
        .map_err(|e| format!("not an X.509 certificate: {e}"))?;
    Ok(Sha256::digest(cert.subject_public_key_info().as_ref()).into())
}

/// A verifier that runs the usual checks first, then the pin.
#[derive(Debug)]
struct Pinned {
    inner: Arc<dyn ServerCertVerifier>,
    pins: Vec<[u8; 32]>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        // Only the leaf: the presented intermediates are not the verified path, so a pinned
        // (public) intermediate certificate sent beside a leaf from another CA must not pass.
        let got = spki_sha256(end_entity).map_err(rustls::Error::General)?;
        if self.pins.contains(&got) {
            Ok(verified)
        } else {
            Err(rustls::Error::General(format!(
                "the upstream's TLS key sha256:{} matches none of the preregistered pins (upstream.tls_spki_sha256)",
                hex::encode(got)
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The rustls configuration of a pinned upstream client: reqwest's own verifier (the platform's
/// roots, or only `SSL_CERT_FILE`/`SSL_CERT_DIR` when set, plus `extra_root_pem`) wrapped by the
/// pin, ring as the provider, and the ALPN reqwest would offer (h2, http/1.1).
pub fn client_config(
    pins: &[[u8; 32]],
    extra_root_pem: Option<&[u8]>,
) -> Result<rustls::ClientConfig, String> {
    let mut tls = verified_config(pins, extra_root_pem)?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tls)
}

/// The same verification for the streamed calls' HTTP/1.1 client (`crate::upstream`): the
/// platform verifier with the extra roots, wrapped by the pins when there are any (none: the
/// plain verifier, as reqwest's unpinned client uses it); ALPN `http/1.1` only.
pub(crate) fn h1_config(
    pins: &[[u8; 32]],
    extra_root_pem: Option<&[u8]>,
) -> Result<rustls::ClientConfig, String> {
    let mut tls = verified_config(pins, extra_root_pem)?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}

fn verified_config(
    pins: &[[u8; 32]],
    extra_root_pem: Option<&[u8]>,
) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let extra = match extra_root_pem {
        Some(pem) => CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("extra root certificates: {e}"))?,
        None => Vec::new(),
    };
    let inner = rustls_platform_verifier::Verifier::new_with_extra_roots(extra, provider.clone())
        .map_err(|e| format!("TLS verifier: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = if pins.is_empty() {
        Arc::new(inner)
    } else {
        Arc::new(Pinned {
            inner: Arc::new(inner),
            pins: pins.to_vec(),
        })
    };
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}
