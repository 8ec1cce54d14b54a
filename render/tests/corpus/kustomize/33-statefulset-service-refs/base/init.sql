CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, placed_at timestamptz NOT NULL);
