// The DER of the subject KEP-6283's proof of concept (kubernetes #139409,
// podcertssigner.go) writes for a Pod: pkix.Name{CommonName: pod, Organization:
// [namespace], ExtraNames: [uid (0.9.2342.19200300.100.1.1) = Pod UID]}, as hex.
// go run . <pod name> <namespace> <pod uid>
package main

import (
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"fmt"
	"os"
)

func main() {
	name := pkix.Name{
		CommonName:   os.Args[1],
		Organization: []string{os.Args[2]},
		ExtraNames: []pkix.AttributeTypeAndValue{{
			Type:  asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 1},
			Value: os.Args[3],
		}},
	}
	der, err := asn1.Marshal(name.ToRDNSequence())
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println(hex.EncodeToString(der))
}
