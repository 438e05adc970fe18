select a, b from orders where customer = 'x''y' and amount > -42.5e3 -- note
