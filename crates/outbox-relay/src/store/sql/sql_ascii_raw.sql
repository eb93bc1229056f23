-- Run once per new connection, as it is (not rendered for a schema): a
-- SQL_ASCII database stores any byte, and the server refuses to send one
-- that is not UTF-8 to a UTF-8 client (failing the whole statement); a
-- SQL_ASCII client gets the bytes as stored. Any other database keeps
-- UTF-8, converted by the server.
DO $enc$ BEGIN
  IF current_setting('server_encoding') = 'SQL_ASCII' THEN SET client_encoding = 'SQL_ASCII'; END IF;
END $enc$
