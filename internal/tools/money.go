package tools

import (
	"fmt"
	"strings"
)

// minorDigits are the decimals of the currencies whose minor unit is not
// the hundredth (Stripe's zero- and three-decimal currencies); every other
// currency has two.
var minorDigits = map[string]int{
	"bif": 0, "clp": 0, "djf": 0, "gnf": 0, "jpy": 0, "kmf": 0, "krw": 0, "mga": 0, "pyg": 0,
	"rwf": 0, "ugx": 0, "vnd": 0, "vuv": 0, "xaf": 0, "xof": 0, "xpf": 0,
	"bhd": 3, "jod": 3, "kwd": 3, "omr": 3, "tnd": 3,
}

// amount writes minor units of currency as a decimal number: 11000 usd is
// "110.00", 500 jpy "500".
func amount(minor int64, currency string) string {
	digits, ok := minorDigits[strings.ToLower(currency)]
	if !ok {
		digits = 2
	}
	sign, u := "", uint64(minor)
	if minor < 0 {
		sign, u = "-", uint64(-minor)
	}
	if digits == 0 {
		return fmt.Sprintf("%s%d", sign, u)
	}
	scale := uint64(1)
	for range digits {
		scale *= 10
	}
	return fmt.Sprintf("%s%d.%0*d", sign, u/scale, digits, u%scale)
}

// money is amount followed by the currency's code in capitals: "110.00 USD".
func money(minor int64, currency string) string {
	return amount(minor, currency) + " " + strings.ToUpper(currency)
}
