package adyentest

import (
	"strconv"
	"strings"
)

// currencyDecimalsURL is Adyen's page "Currency codes and minor units": the number of decimals
// of each currency's amount.value, which is Adyen's own and differs from ISO 4217 for CLP,
// CVE, IDR and ISK.
const currencyDecimalsURL = "https://docs.adyen.com/development-resources/currency-codes"

// decimalsOtherThanTwo is the fake's reading of the Decimals column of Adyen's currency codes
// page (currencyDecimalsURL) for every currency whose value is not in hundredths. It is the
// fake's own table, kept apart from the adapter's code on purpose: the fake must interpret an
// amount as Adyen does, not as payonce believes Adyen does.
//
// The page marks CLP (2, ISO 0) and ISK (2, ISO 0) as having more decimals than ISO 4217, and
// CVE (0, ISO 2) and IDR (0, ISO 2) fewer ("differs from standard"): CLP and ISK are absent
// here because they take 2.
var decimalsOtherThanTwo = map[string]int{
	// No decimals.
	"CVE": 0, // differs from ISO 4217 (2)
	"DJF": 0,
	"GNF": 0,
	"IDR": 0, // differs from ISO 4217 (2)
	"JPY": 0,
	"KMF": 0,
	"KRW": 0,
	"PYG": 0,
	"RWF": 0,
	"UGX": 0,
	"VND": 0,
	"VUV": 0,
	"XAF": 0,
	"XOF": 0,
	"XPF": 0,
	// Three decimals.
	"BHD": 3,
	"IQD": 3,
	"JOD": 3,
	"KWD": 3,
	"LYD": 3,
	"OMR": 3,
	"TND": 3,
}

// Decimals is the number of decimals Adyen's amount.value has in currency (an uppercase ISO
// 4217 code), as Adyen's currency codes page lists it
// (https://docs.adyen.com/development-resources/currency-codes): 2 for EUR, and for CLP and
// ISK; 0 for JPY, and for CVE and IDR; 3 for KWD. A code the fake has no row for counts as 2,
// the page's most common value.
func Decimals(currency string) int {
	if d, ok := decimalsOtherThanTwo[currency]; ok {
		return d
	}
	return 2
}

// FormatValue writes value minor units of currency as a decimal amount under Adyen's decimals
// ([Decimals]): FormatValue("CLP", 100000) is "1000.00", FormatValue("CVE", 1000) is "1000".
func FormatValue(currency string, value int64) string {
	d := Decimals(currency)
	neg := value < 0
	digits := strconv.FormatInt(value, 10)
	if neg {
		digits = digits[1:]
	}
	if d > 0 {
		if len(digits) <= d {
			digits = strings.Repeat("0", d-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-d] + "." + digits[len(digits)-d:]
	}
	if neg {
		return "-" + digits
	}
	return digits
}
