"""The ClusterTrustBundle publisher: one normalised trust bundle for the signer, kept
exactly as the trust-bundle file says."""
