# demo-simple-4: implement the five requirements in src/
