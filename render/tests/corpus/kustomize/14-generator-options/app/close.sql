UPDATE ledger SET closed = true WHERE day < current_date;
