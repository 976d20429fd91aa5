// olm-validate checks an OLM bundle directory with the operator-framework's own validators:
// the default bundle validators (CSV, CRDs, bundle) plus the optional operatorframework suite
// that `operator-sdk bundle validate --select-optional suite=operatorframework` selects
// (OperatorHub, good practices, deprecated APIs). Built by scripts/deps.sh against the pinned
// github.com/operator-framework/api; see docs/install.md.
//
// Usage: olm-validate [-k8s-version 1.37] <bundle-dir>
// Prints every finding; exits 1 when any error is found, and also on warnings with -strict.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"
)

func main() {
	k8sVersion := flag.String("k8s-version", "", "Kubernetes version the deprecated-API check targets (default: the CSV's minKubeVersion)")
	strict := flag.Bool("strict", false, "fail on warnings too")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: olm-validate [-k8s-version X.Y] [-strict] <bundle-dir>")
		os.Exit(2)
	}
	dir := flag.Arg(0)

	bundle, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: loading the bundle in %s: %v\n", dir, err)
		os.Exit(1)
	}

	validators := interfaces.Validators{}
	validators = append(validators, validation.DefaultBundleValidators...)
	validators = append(validators,
		// suite=operatorframework: operatorhub (its V2 form plus the categories and
		// capabilities checks it was split into), good practices, deprecated APIs.
		validation.OperatorHubV2Validator,
		validation.StandardCategoriesValidator,
		validation.StandardCapabilitiesValidator,
		validation.GoodPracticesValidator,
		validation.AlphaDeprecatedAPIsValidator,
	)
	objs := bundle.ObjectsToValidate()
	optional := map[string]string{}
	if *k8sVersion != "" {
		optional["k8s-version"] = *k8sVersion
	}
	objs = append(objs, optional)

	var nErr, nWarn int
	for _, result := range validators.Validate(objs...) {
		for _, e := range result.Errors {
			nErr++
			fmt.Printf("ERROR   %s: %s\n", result.Name, e.Error())
		}
		for _, w := range result.Warnings {
			nWarn++
			fmt.Printf("WARNING %s: %s\n", result.Name, w.Error())
		}
	}
	fmt.Printf("olm-validate %s: %d error(s), %d warning(s) from %d validators\n", dir, nErr, nWarn, len(validators))
	if nErr > 0 || (*strict && nWarn > 0) {
		os.Exit(1)
	}
}
