// Command genbook writes the opening book Shoal ships (package books): positions
// reached by random legal moves from the standard position, with equal material, none in check,
// no two alike, in a fixed order. The same seed gives the same book.
//
//	go run ./worker/match/internal/genbook -o books/shipped/shoal_openings_v1.epd (go generate ./books)
package main

import (
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/shoal-chess/shoal/worker/match/internal/genbook/gen"
)

func main() {
	out := flag.String("o", "", "file to write (default: standard output)")
	flag.Parse()
	w := os.Stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		w = f
	}
	for _, line := range gen.Book() {
		fmt.Fprintln(w, line)
	}
}
