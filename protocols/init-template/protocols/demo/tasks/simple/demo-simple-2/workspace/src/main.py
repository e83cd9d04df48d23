# demo-simple-2: implement the five requirements in src/
