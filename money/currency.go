package money

import (
	"sort"
	"strings"
)

// Currency is an ISO 4217 alphabetic code such as "EUR". Only codes in the
// package's table are valid; every constructor checks, so a [Money] never
// holds an unknown currency. The constants below name the common ones;
// any other table code can be written as Currency("CHF") or obtained from
// [ParseCurrency].
type Currency string

// Common currencies. The table holds every active ISO 4217 currency with
// a defined number of minor units.
const (
	EUR Currency = "EUR"
	USD Currency = "USD"
	GBP Currency = "GBP"
	CHF Currency = "CHF"
	JPY Currency = "JPY"
	KRW Currency = "KRW"
	KWD Currency = "KWD"
	BHD Currency = "BHD"
)

// minorUnits is the ISO 4217 exponent of each active currency (list one,
// "Minor unit" column). Codes whose minor unit is "N.A." (precious
// metals, testing codes, SDR) are absent: they are not money a payment
// provider charges.
//
// Providers sometimes deviate from ISO for display or payouts (Stripe
// charges ISK, HUF and TWD with quirks of its own); such adjustments
// belong in the provider adapter, not here.
var minorUnits = map[Currency]int32{
	"AED": 2, "AFN": 2, "ALL": 2, "AMD": 2, "ANG": 2, "AOA": 2, "ARS": 2, "AUD": 2,
	"AWG": 2, "AZN": 2, "BAM": 2, "BBD": 2, "BDT": 2, "BGN": 2, "BHD": 3, "BIF": 0,
	"BMD": 2, "BND": 2, "BOB": 2, "BOV": 2, "BRL": 2, "BSD": 2, "BTN": 2, "BWP": 2,
	"BYN": 2, "BZD": 2, "CAD": 2, "CDF": 2, "CHE": 2, "CHF": 2, "CHW": 2, "CLF": 4,
	"CLP": 0, "CNY": 2, "COP": 2, "COU": 2, "CRC": 2, "CUP": 2, "CVE": 2, "CZK": 2,
	"DJF": 0, "DKK": 2, "DOP": 2, "DZD": 2, "EGP": 2, "ERN": 2, "ETB": 2, "EUR": 2,
	"FJD": 2, "FKP": 2, "GBP": 2, "GEL": 2, "GHS": 2, "GIP": 2, "GMD": 2, "GNF": 0,
	"GTQ": 2, "GYD": 2, "HKD": 2, "HNL": 2, "HTG": 2, "HUF": 2, "IDR": 2, "ILS": 2,
	"INR": 2, "IQD": 3, "IRR": 2, "ISK": 0, "JMD": 2, "JOD": 3, "JPY": 0, "KES": 2,
	"KGS": 2, "KHR": 2, "KMF": 0, "KPW": 2, "KRW": 0, "KWD": 3, "KYD": 2, "KZT": 2,
	"LAK": 2, "LBP": 2, "LKR": 2, "LRD": 2, "LSL": 2, "LYD": 3, "MAD": 2, "MDL": 2,
	"MGA": 2, "MKD": 2, "MMK": 2, "MNT": 2, "MOP": 2, "MRU": 2, "MUR": 2, "MVR": 2,
	"MWK": 2, "MXN": 2, "MXV": 2, "MYR": 2, "MZN": 2, "NAD": 2, "NGN": 2, "NIO": 2,
	"NOK": 2, "NPR": 2, "NZD": 2, "OMR": 3, "PAB": 2, "PEN": 2, "PGK": 2, "PHP": 2,
	"PKR": 2, "PLN": 2, "PYG": 0, "QAR": 2, "RON": 2, "RSD": 2, "RUB": 2, "RWF": 0,
	"SAR": 2, "SBD": 2, "SCR": 2, "SDG": 2, "SEK": 2, "SGD": 2, "SHP": 2, "SLE": 2,
	"SOS": 2, "SRD": 2, "SSP": 2, "STN": 2, "SVC": 2, "SYP": 2, "SZL": 2, "THB": 2,
	"TJS": 2, "TMT": 2, "TND": 3, "TOP": 2, "TRY": 2, "TTD": 2, "TWD": 2, "TZS": 2,
	"UAH": 2, "UGX": 0, "USD": 2, "USN": 2, "UYI": 0, "UYU": 2, "UYW": 4, "UZS": 2,
	"VED": 2, "VES": 2, "VND": 0, "VUV": 0, "WST": 2, "XAF": 0, "XCD": 2, "XCG": 2,
	"XOF": 0, "XPF": 0, "YER": 2, "ZAR": 2, "ZMW": 2, "ZWG": 2,
}

// ParseCurrency returns the currency for an ISO 4217 code. Case is ignored
// ("eur", as Stripe writes it, is EUR); surrounding space is not.
//
// Errors: [ErrUnknownCurrency] (as *[Error]) for a code not in the table.
func ParseCurrency(code string) (Currency, error) {
	c := Currency(strings.ToUpper(code))
	if len(code) != 3 {
		return "", &Error{Kind: ErrUnknownCurrency, Value: code}
	}
	if _, ok := minorUnits[c]; !ok {
		return "", &Error{Kind: ErrUnknownCurrency, Value: code}
	}
	return c, nil
}

// MinorUnits returns the number of decimal places of the currency's minor
// unit: 2 for EUR (cents), 0 for JPY, 3 for KWD and BHD.
//
// Errors: [ErrUnknownCurrency] (as *[Error]).
func (c Currency) MinorUnits() (int, error) {
	n, err := c.units()
	return int(n), err
}

func (c Currency) units() (int32, error) {
	if len(c) == 3 {
		if n, ok := minorUnits[c]; ok {
			return n, nil
		}
		if n, ok := minorUnits[Currency(strings.ToUpper(string(c)))]; ok {
			return n, nil
		}
	}
	return 0, &Error{Kind: ErrUnknownCurrency, Value: string(c)}
}

// canonical returns the upper-case code and its minor units.
func (c Currency) canonical() (Currency, int32, error) {
	n, err := c.units()
	if err != nil {
		return "", 0, err
	}
	return Currency(strings.ToUpper(string(c))), n, nil
}

// String returns the code.
func (c Currency) String() string { return string(c) }

// Currencies returns every currency in the table, sorted by code.
func Currencies() []Currency {
	out := make([]Currency, 0, len(minorUnits))
	for c := range minorUnits {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
