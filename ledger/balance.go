package ledger

import "github.com/gpumesh/gpumesh/ledger/record"

// Balances returns the balance per counterparty over the whole ledger.
// Receipts, successions and disputes do not move balances.
func (db *DB) Balances() (map[string]record.Balance, error) {
	out := make(map[string]record.Balance)
	err := db.scan(record.Filter{}, func(e *record.Entry) error {
		if e.Kind == record.KindReceipt || e.Kind == record.KindSuccession || e.Kind == record.KindDispute {
			return nil
		}
		b := out[e.Counterparty]
		switch e.Kind {
		case record.KindPaymentOwed:
			b.Owed += e.Amount
		case record.KindPaymentEarned:
			b.Earned += e.Amount
		case record.KindPreemptionCredit:
			if e.Direction == record.DirCreditGranted {
				b.Credits -= e.Amount
			} else {
				b.Credits += e.Amount
			}
		}
		b.Net = b.Earned - b.Owed + b.Credits
		out[e.Counterparty] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
