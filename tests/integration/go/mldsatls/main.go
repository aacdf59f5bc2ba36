// A TLS 1.3 handshake in one process with a certificate the signer issued: the server
// loads the chain and the (ML-DSA) key, the client trusts only the CA and verifies the
// server as <name>. Prints "handshake ok: <version>, <key type>" or exits 1.
// go run . <chain.pem> <key.pem> <ca.pem> <name>   (Go 1.27+: crypto/tls knows ML-DSA)
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

func main() {
	pair, err := tls.LoadX509KeyPair(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Println("load:", err)
		os.Exit(1)
	}
	ca, _ := os.ReadFile(os.Args[3])
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: os.Args[4]})
	if err != nil {
		fmt.Println("handshake:", err)
		os.Exit(1)
	}
	st := conn.ConnectionState()
	leaf := st.PeerCertificates[0]
	fmt.Printf("handshake ok: %s, %s\n", tls.VersionName(st.Version), leaf.PublicKeyAlgorithm)
}
