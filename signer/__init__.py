"""The PodCertificateRequest signer: which requests we sign, for which DNS names, with
which certificate, and how waiting requests are re-driven when their Services appear."""
