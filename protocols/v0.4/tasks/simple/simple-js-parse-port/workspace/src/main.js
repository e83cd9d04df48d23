// simple-js-parse-port: implement the five requirements in src/
