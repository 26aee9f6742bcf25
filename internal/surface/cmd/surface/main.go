// Command surface prints the module's public packages, the number of
// exported names in each and in all, and any internal type a public
// signature names. Run it from the module's root:
//
//	go run ./internal/surface/cmd/surface [-v]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/idemgate/idemgate/internal/surface"
)

func main() {
	verbose := flag.Bool("v", false, "list every exported name")
	flag.Parse()
	paths, err := surface.PublicPackages(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "surface:", err)
		os.Exit(1)
	}
	pkgs, err := surface.Measure(".", paths)
	if err != nil {
		fmt.Fprintln(os.Stderr, "surface:", err)
		os.Exit(1)
	}
	total, declared := 0, 0
	for _, p := range pkgs {
		fmt.Printf("%-45s %4d exported names, %4d without fields\n", p.Path, len(p.Names), p.Declared())
		declared += p.Declared()
		total += len(p.Names)
		if *verbose {
			for _, n := range p.Names {
				fmt.Println("    ", n)
			}
		}
		for _, l := range p.Leaks {
			fmt.Printf("    LEAK %s names an internal type\n", l)
		}
	}
	fmt.Printf("%-45s %4d exported names, %4d without fields\n", "total", total, declared)
}
