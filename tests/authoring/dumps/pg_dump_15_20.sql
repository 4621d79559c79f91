--
-- PostgreSQL database dump
--

\restrict RSEusGHGIcK5TZdtkMB2FFGpMddNvc00zp3faHdo7gTeH9eZ5E0aBsHIGVSIWKH

-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: shop; Type: SCHEMA; Schema: -; Owner: prod_owner_not_here
--

CREATE SCHEMA shop;


ALTER SCHEMA shop OWNER TO prod_owner_not_here;

--
-- Name: tablefunc; Type: EXTENSION; Schema: -; Owner: -
--

CREATE EXTENSION IF NOT EXISTS tablefunc WITH SCHEMA public;


--
-- Name: EXTENSION tablefunc; Type: COMMENT; Schema: -; Owner: 
--

COMMENT ON EXTENSION tablefunc IS 'functions that manipulate whole tables, including crosstab';


--
-- Name: order_status; Type: TYPE; Schema: shop; Owner: postgres
--

CREATE TYPE shop.order_status AS ENUM (
    'new',
    'paid',
    'refunded'
);


ALTER TYPE shop.order_status OWNER TO postgres;

--
-- Name: order_count(bigint); Type: FUNCTION; Schema: shop; Owner: postgres
--

CREATE FUNCTION shop.order_count(c bigint) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$ SELECT count(*) FROM shop.orders WHERE customer_id = c $$;


ALTER FUNCTION shop.order_count(c bigint) OWNER TO postgres;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: customers; Type: TABLE; Schema: shop; Owner: prod_owner_not_here
--

CREATE TABLE shop.customers (
    id bigint NOT NULL,
    email text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


ALTER TABLE shop.customers OWNER TO prod_owner_not_here;

--
-- Name: customers_id_seq; Type: SEQUENCE; Schema: shop; Owner: prod_owner_not_here
--

CREATE SEQUENCE shop.customers_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


ALTER TABLE shop.customers_id_seq OWNER TO prod_owner_not_here;

--
-- Name: customers_id_seq; Type: SEQUENCE OWNED BY; Schema: shop; Owner: prod_owner_not_here
--

ALTER SEQUENCE shop.customers_id_seq OWNED BY shop.customers.id;


--
-- Name: orders; Type: TABLE; Schema: shop; Owner: prod_owner_not_here
--

CREATE TABLE shop.orders (
    id bigint NOT NULL,
    customer_id bigint NOT NULL,
    status shop.order_status DEFAULT 'new'::shop.order_status NOT NULL,
    total numeric(12,2) NOT NULL,
    placed_at timestamp with time zone NOT NULL,
    CONSTRAINT orders_total_check CHECK ((total >= (0)::numeric))
);


ALTER TABLE shop.orders OWNER TO prod_owner_not_here;

--
-- Name: TABLE orders; Type: COMMENT; Schema: shop; Owner: prod_owner_not_here
--

COMMENT ON TABLE shop.orders IS 'One row per order; café ☕';


--
-- Name: orders_id_seq; Type: SEQUENCE; Schema: shop; Owner: prod_owner_not_here
--

CREATE SEQUENCE shop.orders_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


ALTER TABLE shop.orders_id_seq OWNER TO prod_owner_not_here;

--
-- Name: orders_id_seq; Type: SEQUENCE OWNED BY; Schema: shop; Owner: prod_owner_not_here
--

ALTER SEQUENCE shop.orders_id_seq OWNED BY shop.orders.id;


--
-- Name: paid_orders; Type: VIEW; Schema: shop; Owner: prod_owner_not_here
--

CREATE VIEW shop.paid_orders AS
 SELECT orders.id,
    orders.customer_id,
    orders.total
   FROM shop.orders
  WHERE (orders.status = 'paid'::shop.order_status);


ALTER TABLE shop.paid_orders OWNER TO prod_owner_not_here;

--
-- Name: customers id; Type: DEFAULT; Schema: shop; Owner: prod_owner_not_here
--

ALTER TABLE ONLY shop.customers ALTER COLUMN id SET DEFAULT nextval('shop.customers_id_seq'::regclass);


--
-- Name: orders id; Type: DEFAULT; Schema: shop; Owner: prod_owner_not_here
--

ALTER TABLE ONLY shop.orders ALTER COLUMN id SET DEFAULT nextval('shop.orders_id_seq'::regclass);


--
-- Name: customers customers_email_key; Type: CONSTRAINT; Schema: shop; Owner: prod_owner_not_here
--

ALTER TABLE ONLY shop.customers
    ADD CONSTRAINT customers_email_key UNIQUE (email);


--
-- Name: customers customers_pkey; Type: CONSTRAINT; Schema: shop; Owner: prod_owner_not_here
--

ALTER TABLE ONLY shop.customers
    ADD CONSTRAINT customers_pkey PRIMARY KEY (id);


--
-- Name: orders orders_pkey; Type: CONSTRAINT; Schema: shop; Owner: prod_owner_not_here
--

ALTER TABLE ONLY shop.orders
    ADD CONSTRAINT orders_pkey PRIMARY KEY (id);


--
-- Name: orders_by_customer; Type: INDEX; Schema: shop; Owner: prod_owner_not_here
--

CREATE INDEX orders_by_customer ON shop.orders USING btree (customer_id);


--
-- Name: orders orders_customer_id_fkey; Type: FK CONSTRAINT; Schema: shop; Owner: prod_owner_not_here
--

ALTER TABLE ONLY shop.orders
    ADD CONSTRAINT orders_customer_id_fkey FOREIGN KEY (customer_id) REFERENCES shop.customers(id);


--
-- Name: SCHEMA shop; Type: ACL; Schema: -; Owner: prod_owner_not_here
--

GRANT USAGE ON SCHEMA shop TO prod_reader_not_here;


--
-- Name: TABLE customers; Type: ACL; Schema: shop; Owner: prod_owner_not_here
--

GRANT SELECT ON TABLE shop.customers TO prod_reader_not_here;


--
-- Name: TABLE orders; Type: ACL; Schema: shop; Owner: prod_owner_not_here
--

GRANT SELECT ON TABLE shop.orders TO prod_reader_not_here;


--
-- Name: TABLE paid_orders; Type: ACL; Schema: shop; Owner: prod_owner_not_here
--

GRANT SELECT ON TABLE shop.paid_orders TO prod_reader_not_here;


--
-- PostgreSQL database dump complete
--

\unrestrict RSEusGHGIcK5TZdtkMB2FFGpMddNvc00zp3faHdo7gTeH9eZ5E0aBsHIGVSIWKH

