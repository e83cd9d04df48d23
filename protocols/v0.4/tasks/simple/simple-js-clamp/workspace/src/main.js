// simple-js-clamp: implement the five requirements in src/
