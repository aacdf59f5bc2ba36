// A JVM TLS client configured the way a Java application is: the default SSLContext with
// -Djavax.net.ssl.trustStore=<PKCS#12 from the injected ConfigMap> (and its password, if
// any), HTTPS endpoint identification on. Connects to <address> <port>, verifies the
// server as <hostname>, prints "verified <subject>" or exits 1 with the failure.
// Run with Java 11+'s single-file launcher: java TrustCheck.java <address> <port> <hostname>
import java.net.Socket;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.SSLSocketFactory;

public class TrustCheck {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[1]);
        SSLSocketFactory factory = (SSLSocketFactory) SSLSocketFactory.getDefault();
        try (Socket raw = new Socket(args[0], port);
             SSLSocket tls = (SSLSocket) factory.createSocket(raw, args[2], port, true)) {
            SSLParameters params = tls.getSSLParameters();
            params.setEndpointIdentificationAlgorithm("HTTPS");
            tls.setSSLParameters(params);
            tls.startHandshake();
            java.security.cert.X509Certificate leaf =
                (java.security.cert.X509Certificate) tls.getSession().getPeerCertificates()[0];
            System.out.println("verified " + leaf.getSubjectAlternativeNames());
        } catch (javax.net.ssl.SSLException e) {
            System.out.println("failed " + e);
            System.exit(1);
        }
    }
}
