# demo-simple-3: implement the five requirements in src/
