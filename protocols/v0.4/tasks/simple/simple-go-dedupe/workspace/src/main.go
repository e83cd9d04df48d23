// simple-go-dedupe: implement the five requirements in src/
