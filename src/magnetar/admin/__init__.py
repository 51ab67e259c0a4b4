"""magnetar.admin"""
